//! `evidence_seal_native.AvroWriter`: the compiled twin of `evidence_contract._fastwrite`.
//!
//! Built once from a fastavro-parsed record schema (the dicts, lists and strings that
//! `compile_writer` takes), it writes a record's canonical Avro binary with exactly that
//! writer's rules: fields in schema order, a field left out written as its default, minimal
//! zig-zag varints, each non-empty array as one block, a union's branch by the value's exact
//! Python type, and every value checked by exact type as it is written (a bool is never an
//! int, an int or long within its range, a double takes a float or an int a double holds
//! exactly, a string that encodes as UTF-8, a fixed of its size, an enum one of its symbols,
//! a record no field its schema does not name). `write` answers `None` for anything else,
//! and the caller takes the pure path, which decides and words the error: so this writer only
//! has to be right when it answers bytes. A schema `compile_writer` does not handle (a map,
//! a float, a logical type, a union two of whose branches one Python type picks) is refused
//! here too: the constructor raises `ValueError`. `tests/unit/test_native_avro.py` holds both
//! writers to the same bytes.

use std::collections::HashMap;

use crate::varint;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

/// Not written here: the caller takes the pure path.
struct No;
type R<T> = Result<T, No>;

impl From<PyErr> for No {
    fn from(_: PyErr) -> Self {
        No
    }
}

/// The Python type that picks a union's branch (`_fastwrite._PICK`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Pick {
    None,
    Bool,
    Int,
    Float,
    Str,
    Bytes,
    List,
    Dict,
}

struct Field {
    name: Py<PyString>,
    default: Option<Py<PyAny>>,
    node: Node,
}

enum Node {
    Null,
    Boolean,
    Int,
    Long,
    Double,
    Str,
    Bytes,
    Fixed(usize),
    Enum(HashMap<String, u64>),
    Array(Box<Node>),
    Record(Vec<Field>),
    /// (branch index, the type that picks it, the branch)
    Union(Vec<(u64, Pick, Node)>),
}

const EXACT_DOUBLE: i64 = 1 << 53;

struct Compiler<'py> {
    named: HashMap<String, Bound<'py, PyAny>>,
    depth: usize,
}

fn unsupported<T>(what: &str) -> PyResult<T> {
    Err(PyValueError::new_err(format!("not a schema this writer handles: {what}")))
}

impl<'py> Compiler<'py> {
    /// A named type's definition for a name, else the schema itself (`_Gen.resolve`).
    fn resolve(&self, schema: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        if let Ok(s) = schema.cast::<PyString>() {
            let name = s.to_str()?;
            if let Some(def) = self.named.get(name) {
                return Ok(def.clone());
            }
            let d = PyDict::new(schema.py());
            d.set_item("type", s)?;
            return Ok(d.into_any());
        }
        if let Ok(d) = schema.cast::<PyDict>() {
            if let Some(t) = d.get_item("type")? {
                if t.cast::<PyDict>().is_ok() || t.cast::<PyList>().is_ok() {
                    return self.resolve(&t);
                }
            }
        }
        Ok(schema.clone())
    }

    fn kind(&self, schema: &Bound<'py, PyAny>) -> PyResult<String> {
        let s = self.resolve(schema)?;
        let Ok(d) = s.cast::<PyDict>() else {
            return unsupported("a union in a union");
        };
        match d.get_item("type")? {
            Some(t) => Ok(t.extract::<String>()?),
            None => unsupported("a type without its name"),
        }
    }

    fn node(&mut self, schema: &Bound<'py, PyAny>) -> PyResult<Node> {
        self.depth += 1;
        if self.depth > 64 {
            return unsupported("a schema nested deeper than 64 (a recursive type?)");
        }
        let out = self.node_inner(schema);
        self.depth -= 1;
        out
    }

    fn node_inner(&mut self, schema: &Bound<'py, PyAny>) -> PyResult<Node> {
        let schema = self.resolve(schema)?;
        if let Ok(branches) = schema.cast::<PyList>() {
            return self.union(branches);
        }
        let Ok(d) = schema.cast::<PyDict>() else {
            return unsupported("a schema that is neither a name, a union nor a type");
        };
        if d.contains("logicalType")? {
            return unsupported("logical types");
        }
        let t: String = match d.get_item("type")? {
            Some(t) => t.extract()?,
            None => return unsupported("a type without its name"),
        };
        let name = || -> PyResult<String> {
            match d.get_item("name")? {
                Some(n) => n.extract(),
                None => unsupported("a named type without its name"),
            }
        };
        Ok(match t.as_str() {
            "null" => Node::Null,
            "boolean" => Node::Boolean,
            "int" => Node::Int,
            "long" => Node::Long,
            "double" => Node::Double,
            "string" => Node::Str,
            "bytes" => Node::Bytes,
            "fixed" => {
                self.named.insert(name()?, schema.clone());
                let size: usize = match d.get_item("size")? {
                    Some(s) => s.extract()?,
                    None => return unsupported("a fixed without its size"),
                };
                Node::Fixed(size)
            }
            "enum" => {
                self.named.insert(name()?, schema.clone());
                let symbols: Vec<String> = match d.get_item("symbols")? {
                    Some(s) => s.extract()?,
                    None => return unsupported("an enum without its symbols"),
                };
                Node::Enum(symbols.into_iter().enumerate().map(|(i, s)| (s, i as u64)).collect())
            }
            "array" => match d.get_item("items")? {
                Some(items) => Node::Array(Box::new(self.node(&items)?)),
                None => return unsupported("an array without its items"),
            },
            "record" | "error" => {
                self.named.insert(name()?, schema.clone());
                let Some(fields) = d.get_item("fields")? else {
                    return unsupported("a record without its fields");
                };
                let mut out = Vec::new();
                for f in fields.cast::<PyList>()?.iter() {
                    let f = f.cast::<PyDict>()?;
                    let (Some(fname), Some(ftype)) = (f.get_item("name")?, f.get_item("type")?)
                    else {
                        return unsupported("a field without its name or type");
                    };
                    let fname = fname.cast::<PyString>()?.clone();
                    let default = f.get_item("default")?.map(|v| v.unbind());
                    let node = self.node(&ftype)?;
                    out.push(Field { name: fname.unbind(), default, node });
                }
                Node::Record(out)
            }
            other => return unsupported(other), // float (its rounding), map, anything new
        })
    }

    fn union(&mut self, branches: &Bound<'py, PyList>) -> PyResult<Node> {
        let mut out: Vec<(u64, Pick, Node)> = Vec::new();
        for (k, branch) in branches.iter().enumerate() {
            let pick = match self.kind(&branch)?.as_str() {
                "null" => Pick::None,
                "boolean" => Pick::Bool,
                "int" | "long" => Pick::Int,
                "double" => Pick::Float,
                "string" | "enum" => Pick::Str,
                "bytes" | "fixed" => Pick::Bytes,
                "array" => Pick::List,
                "record" => Pick::Dict,
                other => return unsupported(other),
            };
            if out.iter().any(|(_, p, _)| *p == pick) {
                return unsupported("two branches of one Python type");
            }
            out.push((k as u64, pick, self.node(&branch)?));
        }
        Ok(Node::Union(out))
    }
}

fn length(out: &mut Vec<u8>, n: usize) {
    varint(out, n as i64);
}

/// The exact Python type of `v` among those that pick a branch (`type(v) is ...`).
fn pick_of(v: &Bound<'_, PyAny>) -> Option<Pick> {
    if v.is_none() {
        Some(Pick::None)
    } else if v.is_exact_instance_of::<PyBool>() {
        Some(Pick::Bool)
    } else if v.is_exact_instance_of::<PyInt>() {
        Some(Pick::Int)
    } else if v.is_exact_instance_of::<PyFloat>() {
        Some(Pick::Float)
    } else if v.is_exact_instance_of::<PyString>() {
        Some(Pick::Str)
    } else if v.is_exact_instance_of::<PyBytes>() {
        Some(Pick::Bytes)
    } else if v.is_exact_instance_of::<PyList>() {
        Some(Pick::List)
    } else if v.is_exact_instance_of::<PyDict>() {
        Some(Pick::Dict)
    } else {
        None
    }
}

impl Node {
    /// Write `v` as this node; `typed`: a union already chose the branch by `v`'s exact type.
    fn write(&self, py: Python<'_>, v: &Bound<'_, PyAny>, typed: bool, out: &mut Vec<u8>) -> R<()> {
        match self {
            Node::Null => {
                if !v.is_none() {
                    return Err(No);
                }
            }
            Node::Boolean => {
                let b = v.cast_exact::<PyBool>().map_err(|_| No)?;
                out.push(b.is_true() as u8);
            }
            Node::Int | Node::Long => {
                if !typed && !v.is_exact_instance_of::<PyInt>() {
                    return Err(No);
                }
                let n: i64 = v.extract()?; // beyond 64 bits: refused (so is a long there)
                if matches!(self, Node::Int) && i32::try_from(n).is_err() {
                    return Err(No);
                }
                varint(out, n);
            }
            Node::Double => {
                let x = if v.is_exact_instance_of::<PyFloat>() {
                    v.cast_exact::<PyFloat>().map_err(|_| No)?.value()
                } else if !typed && v.is_exact_instance_of::<PyInt>() {
                    let n: i64 = v.extract()?;
                    if !(-EXACT_DOUBLE..=EXACT_DOUBLE).contains(&n) {
                        return Err(No);
                    }
                    n as f64
                } else {
                    return Err(No);
                };
                out.extend_from_slice(&x.to_le_bytes());
            }
            Node::Str => {
                let s = v.cast_exact::<PyString>().map_err(|_| No)?;
                let s = s.to_str()?; // a lone surrogate does not encode: refused
                length(out, s.len());
                out.extend_from_slice(s.as_bytes());
            }
            Node::Bytes => {
                let b = v.cast_exact::<PyBytes>().map_err(|_| No)?.as_bytes();
                length(out, b.len());
                out.extend_from_slice(b);
            }
            Node::Fixed(size) => {
                let b = v.cast_exact::<PyBytes>().map_err(|_| No)?.as_bytes();
                if b.len() != *size {
                    return Err(No);
                }
                out.extend_from_slice(b);
            }
            Node::Enum(symbols) => {
                let s = v.cast_exact::<PyString>().map_err(|_| No)?.to_str()?;
                varint(out, *symbols.get(s).ok_or(No)? as i64);
            }
            Node::Array(items) => {
                // A list, or a tuple where no union chose the branch (a union picks a list).
                if !v.is_exact_instance_of::<PyList>()
                    && (typed || !v.is_exact_instance_of::<PyTuple>())
                {
                    return Err(No);
                }
                let n = v.len()?;
                if n > 0 {
                    length(out, n);
                    for item in v.try_iter()? {
                        items.write(py, &item?, false, out)?;
                    }
                }
                out.push(0);
            }
            Node::Record(fields) => {
                let d = v.cast_exact::<PyDict>().map_err(|_| No)?;
                // Every key the dict has is a field name iff each key found is one of them.
                let mut found = 0usize;
                for f in fields {
                    let value = match d.get_item(f.name.bind(py))? {
                        Some(value) => {
                            found += 1;
                            value
                        }
                        None => match &f.default {
                            Some(dflt) => dflt.bind(py).clone(),
                            None => return Err(No),
                        },
                    };
                    f.node.write(py, &value, false, out)?;
                }
                if found != d.len() {
                    return Err(No); // a field the schema does not name
                }
            }
            Node::Union(branches) => {
                let pick = pick_of(v).ok_or(No)?;
                let (k, _, node) = branches.iter().find(|(_, p, _)| *p == pick).ok_or(No)?;
                varint(out, *k as i64);
                if pick != Pick::None {
                    node.write(py, v, true, out)?;
                }
            }
        }
        Ok(())
    }
}

/// A record schema's canonical Avro writer (the module docstring).
#[pyclass(frozen, module = "evidence_seal_native")]
pub struct AvroWriter {
    root: Node,
}

#[pymethods]
impl AvroWriter {
    /// `schema`: a fastavro-parsed schema (`evidence_contract.codec.SCHEMAS[name].parsed`).
    #[new]
    fn new(schema: &Bound<'_, PyAny>) -> PyResult<Self> {
        let mut c = Compiler { named: HashMap::new(), depth: 0 };
        Ok(AvroWriter { root: c.node(schema)? })
    }

    /// The canonical Avro binary of `record`, or `None` when this writer does not write it
    /// (the pure path decides).
    fn write<'py>(&self, py: Python<'py>, record: &Bound<'py, PyAny>) -> Option<Bound<'py, PyBytes>> {
        let mut out = Vec::with_capacity(2048);
        match self.root.write(py, record, false, &mut out) {
            Ok(()) => Some(PyBytes::new(py, &out)),
            Err(No) => {
                // A Python error met on the way (a key's hash, say) is the pure path's to raise.
                let _ = PyErr::take(py);
                None
            }
        }
    }
}
