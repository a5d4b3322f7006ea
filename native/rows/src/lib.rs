//! The projector's row path, compiled: one log message in, its `records` row out.
//!
//! For a single-object-encoded EvidenceRecord (record contract 2.2, or 2.1 and 2.0 read with
//! their own schema) this returns what `projections.rows.record_row` returns (the row as Python values),
//! the row as a PostgreSQL binary COPY tuple for `RECORD_COLUMNS`/`RECORD_TYPES`, byte for byte
//! what psycopg's `write_row` writes for that row, and the record's Merkle leaf hash
//! (`merkle.record_leaf_hash`).
//!
//! It only has to be right when it answers: anything unusual (not canonical Avro binary as
//! `schemas._fastread` defines it, a digest that is not 32 bytes, trailing bytes, another
//! schema, a value the pure path would reject or convert in a way not reproduced here) is
//! `None`, and the caller decodes that message with the pure path, which gives its exact
//! error. So every check below errs towards `None`. A record mapped from telemetry (2.2,
//! `telemetry` set: rare) is `None` too: the pure path makes its row.

use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;
use pyo3::{ffi, intern};
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDateTime, PyList, PyString, PyTuple, PyTzInfo, PyType};
use sha2::{Digest, Sha256};

/// EvidenceRecord 2.2 (current), 2.1 and 2.0 (avro/history/): the 8-byte header fingerprints.
const FP_2_2: [u8; 8] = [0xd3, 0x21, 0xf2, 0xab, 0x8d, 0x47, 0xb5, 0xd4];
const FP_2_1: [u8; 8] = [0x59, 0x8d, 0x7a, 0x24, 0xf4, 0x1b, 0x92, 0x28];
const FP_2_0: [u8; 8] = [0x85, 0x4b, 0x3d, 0x02, 0xa9, 0x04, 0xfe, 0x84];
const MARKER: [u8; 2] = [0xc3, 0x01];
const HEADER_SIZE: usize = 10;
const DIGEST_SIZE: usize = 32;
const LEAF_LABEL: &[u8] = b"evidence-store/v2 record\n";
const COLUMNS: i16 = 48;

const OUTCOMES: [&str; 3] = ["COMMITTED", "FAILED", "UNKNOWN"];
const POLICIES: [&str; 2] = ["VALUE", "HASH_ONLY"];

/// Python's datetime range, in microseconds since the Unix epoch (0001-01-01 to 9999-12-31).
const MIN_US: i64 = -62_135_596_800_000_000;
const MAX_US: i64 = 253_402_300_799_999_999;
/// PostgreSQL's timestamp epoch, 2000-01-01, in Unix microseconds.
const PG_EPOCH_US: i64 = 946_684_800_000_000;
/// psycopg's `BIT_PER_PGDIGIT` (log(2) / log(10000)) as the same double.
const BIT_PER_PGDIGIT: f64 = 0.07525749891599529;
const MAX_SEED_DIGITS: usize = 4300;

// --- Avro binary, canonical only (evidence_contract/_fastread.py) -----------------------------------

struct Avro<'a> {
    d: &'a [u8],
    p: usize,
}

impl<'a> Avro<'a> {
    fn byte(&mut self) -> Option<u8> {
        let b = *self.d.get(self.p)?;
        self.p += 1;
        Some(b)
    }

    /// A zig-zag varint in its one minimal encoding of at most nine bytes.
    fn long(&mut self) -> Option<i64> {
        let first = self.byte()?;
        let z: u64 = if first < 0x80 {
            first as u64
        } else {
            let mut n = (first & 0x7f) as u64;
            let mut shift = 7;
            loop {
                let b = self.byte()?;
                n |= ((b & 0x7f) as u64) << shift;
                if b < 0x80 {
                    if b == 0 {
                        return None; // padded: the value has a shorter encoding
                    }
                    break;
                }
                shift += 7;
                if shift >= 63 {
                    return None; // a tenth byte: fastavro drops bits there
                }
            }
            n
        };
        Some(((z >> 1) as i64) ^ -((z & 1) as i64))
    }

    fn int(&mut self) -> Option<i32> {
        i32::try_from(self.long()?).ok()
    }

    fn boolean(&mut self) -> Option<bool> {
        match self.byte()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.long()?).ok()?;
        let end = self.p.checked_add(n)?;
        let out = self.d.get(self.p..end)?;
        self.p = end;
        Some(out)
    }

    fn string(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.bytes()?).ok()
    }

    fn digest(&mut self) -> Option<&'a [u8]> {
        let b = self.bytes()?;
        (b.len() == DIGEST_SIZE).then_some(b)
    }

    fn double(&mut self) -> Option<f64> {
        let end = self.p.checked_add(8)?;
        let raw: [u8; 8] = self.d.get(self.p..end)?.try_into().ok()?;
        self.p = end;
        let v = f64::from_le_bytes(raw);
        (!v.is_nan()).then_some(v) // a NaN's payload need not survive
    }

    fn index(&mut self, n: usize) -> Option<usize> {
        let i = self.long()?;
        (0..n as i64).contains(&i).then_some(i as usize)
    }

    /// `["null", T]`: false for null, true when T follows.
    fn present(&mut self) -> Option<bool> {
        Some(self.index(2)? == 1)
    }

    fn opt<T>(&mut self, f: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        if self.present()? {
            Some(Some(f(self)?))
        } else {
            Some(None)
        }
    }
}

struct Decoded<'a> {
    schema_version: &'a str,
    event_id: &'a str,
    stream: &'a str,
    captured_at: i64,
    content_key: &'a [u8],
    request_bytes: Option<&'a [u8]>,
    request_length: i64,
    input_digest: Option<&'a [u8]>,
    input_bytes: Option<&'a [u8]>,
    prompt_digest: Option<&'a [u8]>,
    prompt_bytes: Option<&'a [u8]>,
    provider_name: &'a str,
    provider_endpoint: &'a str,
    provider_api_version: Option<&'a str>,
    model_id: Option<&'a str>,
    params: Option<&'a str>,
    fingerprint: Option<&'a str>,
    response_model: Option<&'a str>,
    http_status: Option<i32>,
    response_content_type: Option<&'a str>,
    response_bytes: Option<&'a [u8]>,
    response_length: Option<i64>,
    response_digest: Option<&'a [u8]>,
    output_digest: Option<&'a [u8]>,
    error_bytes: Option<&'a [u8]>,
    outcome: &'static str,
    seed: Option<&'a str>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    deterministic: bool,
    request_policy: &'static str,
    streamed: bool,
    closed_early: bool,
    truncated: bool,
    key_id: Option<&'a str>,
    trace: Option<(&'a [u8], &'a [u8])>,
    seq: i64,
    occurred_at: i64,
    prev_digest: &'a [u8],
    record_digest: &'a [u8],
    writer_id: &'a str,
}

/// The record's fields, read in schema order; None unless canonical, whole, and every digest
/// exactly 32 bytes.
fn read_record(data: &[u8]) -> Option<Decoded<'_>> {
    if data.len() < HEADER_SIZE || data[..2] != MARKER {
        return None;
    }
    // Which optional fields the version appends: encryption (2.1 on), trace and telemetry (2.2).
    let (with_encryption, with_trace) = match &data[2..HEADER_SIZE] {
        fp if fp == FP_2_2 => (true, true),
        fp if fp == FP_2_1 => (true, false),
        fp if fp == FP_2_0 => (false, false),
        _ => return None,
    };
    let a = &mut Avro { d: data, p: HEADER_SIZE };
    let schema_version = a.string()?;
    let event_id = a.string()?;
    let stream = a.string()?;
    let captured_at = a.long()?;
    let content_key = a.digest()?;
    let request_bytes = a.opt(Avro::bytes)?;
    let request_length = a.long()?;
    let input_digest = a.opt(Avro::digest)?;
    let input_bytes = a.opt(Avro::bytes)?;
    let prompt_digest = a.opt(Avro::digest)?;
    let prompt_bytes = a.opt(Avro::bytes)?;
    let count = a.long()?;
    if count < 0 {
        return None; // a block with a byte size
    }
    if count > 0 {
        for _ in 0..count {
            a.string()?; // doc_id
            a.opt(Avro::string)?; // doc_version
            a.digest()?; // chunk_digest
            a.opt(Avro::bytes)?; // chunk_bytes
        }
        if a.byte()? != 0 {
            return None; // one block, then the end marker
        }
    }
    let provider_name = a.string()?;
    let provider_endpoint = a.string()?;
    let provider_api_version = a.opt(Avro::string)?;
    let model_id = a.opt(Avro::string)?;
    let params = a.opt(Avro::string)?;
    let fingerprint = a.opt(Avro::string)?;
    let response_model = a.opt(Avro::string)?;
    let http_status = a.opt(Avro::int)?;
    let response_content_type = a.opt(Avro::string)?;
    let response_bytes = a.opt(Avro::bytes)?;
    let response_length = a.opt(Avro::long)?;
    let response_digest = a.opt(Avro::digest)?;
    let output_digest = a.opt(Avro::digest)?;
    let error_bytes = a.opt(Avro::bytes)?;
    let outcome = OUTCOMES[a.index(OUTCOMES.len())?];
    let seed = a.opt(Avro::string)?;
    let temperature = a.opt(Avro::double)?;
    let top_p = a.opt(Avro::double)?;
    let deterministic = a.boolean()?;
    a.string()?; // capture.library
    a.opt(Avro::string)?; // capture.host
    let request_policy = POLICIES[a.index(POLICIES.len())?];
    let streamed = a.boolean()?;
    let closed_early = a.boolean()?;
    let truncated = a.boolean()?;
    a.long()?; // capture.started_at
    a.opt(Avro::long)?; // capture.duration_us
    let key_id = if with_encryption {
        a.opt(|a| {
            a.string()?; // scheme
            a.string()
        })?
    } else {
        None
    };
    let trace = if with_trace { a.opt(|a| Some((a.bytes()?, a.bytes()?)))? } else { None };
    if with_trace && a.present()? {
        return None; // mapped from telemetry: the pure path makes its row
    }
    let seq = a.long()?;
    let occurred_at = a.long()?;
    let prev_digest = a.digest()?;
    let record_digest = a.digest()?;
    let writer_id = a.string()?;
    a.string()?; // transactional_id
    a.string()?; // version
    a.int()?; // intake_partition
    a.long()?; // intake_offset
    if a.p != data.len() {
        return None; // trailing bytes
    }
    Some(Decoded {
        schema_version, event_id, stream, captured_at, content_key, request_bytes,
        request_length, input_digest, input_bytes, prompt_digest, prompt_bytes, provider_name,
        provider_endpoint, provider_api_version, model_id, params, fingerprint, response_model,
        http_status, response_content_type, response_bytes, response_length, response_digest,
        output_digest, error_bytes, outcome, seed, temperature, top_p, deterministic,
        request_policy, streamed, closed_early, truncated, key_id, trace, seq, occurred_at,
        prev_digest, record_digest, writer_id,
    })
}

// --- Values the pure path converts ---------------------------------------------------------

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// `uuid.UUID(text)` for the 8-4-4-4-12 form only (uuid.UUID takes more; those are None).
fn uuid_bytes(text: &str) -> Option<[u8; 16]> {
    let t = text.as_bytes();
    if t.len() != 36 || [8, 13, 18, 23].iter().any(|&i| t[i] != b'-') {
        return None;
    }
    let mut out = [0u8; 16];
    let mut k = 0;
    let mut i = 0;
    while i < 36 {
        if t[i] == b'-' {
            i += 1;
            continue;
        }
        out[k] = hex_digit(t[i])? << 4 | hex_digit(t[i + 1])?;
        k += 1;
        i += 2;
    }
    Some(out)
}

/// `bytes.fromhex(key_id)` for plain hex digits only (fromhex also skips whitespace).
fn key_id_bytes(text: &str) -> Option<Vec<u8>> {
    let t = text.as_bytes();
    if t.len() % 2 != 0 {
        return None;
    }
    t.chunks(2).map(|p| Some(hex_digit(p[0])? << 4 | hex_digit(p[1])?)).collect()
}

/// `evidence_contract.valid_seed`: `-?(?:0|[1-9][0-9]{0,4299})` in full. Returns the digits.
fn seed_digits(seed: &str) -> Option<(bool, &str)> {
    let (neg, digits) = match seed.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, seed),
    };
    let d = digits.as_bytes();
    let ok = !d.is_empty()
        && d.len() <= MAX_SEED_DIGITS
        && d.iter().all(u8::is_ascii_digit)
        && (d[0] != b'0' || d.len() == 1);
    ok.then_some((neg && digits != "0", digits))
}

/// psycopg's `dump_int_to_numeric_binary` of the integer whose decimal digits are `digits`
/// (no leading zeros), including its digit-count estimate from the bit length.
fn numeric_binary(neg: bool, digits: &str) -> Option<Vec<u8>> {
    // The bit length, from the digits in base 2**32.
    let mut limbs: Vec<u32> = Vec::with_capacity(digits.len() / 9 + 1);
    for chunk in digits.as_bytes().chunks(9) {
        let mut mul: u64 = 1;
        let mut add: u64 = 0;
        for &c in chunk {
            mul *= 10;
            add = add * 10 + (c - b'0') as u64;
        }
        let mut carry = add;
        for limb in limbs.iter_mut() {
            let v = *limb as u64 * mul + carry;
            *limb = v as u32;
            carry = v >> 32;
        }
        if carry > 0 {
            limbs.push(carry as u32);
        }
    }
    let bit_length = match limbs.iter().rposition(|&l| l != 0) {
        Some(top) => 32 * top as u64 + (32 - limbs[top].leading_zeros()) as u64,
        None => 0,
    };
    let ndigits = (bit_length as f64 * BIT_PER_PGDIGIT) as usize + 1;
    // Base-10000 digits, least significant first, from groups of four decimal digits.
    let d = digits.as_bytes();
    let mut groups: Vec<u16> = Vec::with_capacity(d.len() / 4 + 1);
    let mut end = d.len();
    while end > 0 {
        let start = end.saturating_sub(4);
        groups.push(d[start..end].iter().fold(0u16, |v, &c| v * 10 + (c - b'0') as u16));
        end = start;
    }
    while groups.last() == Some(&0) {
        groups.pop(); // "0": no digit written
    }
    if groups.len() > ndigits || ndigits > 32768 {
        return None; // psycopg would not write this value the way it is written here
    }
    let mut out = Vec::with_capacity(8 + 2 * ndigits);
    out.extend_from_slice(&(ndigits as u16).to_be_bytes());
    out.extend_from_slice(&((ndigits - 1) as i16).to_be_bytes());
    out.extend_from_slice(&(if neg { 0x4000u16 } else { 0 }).to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
    out.resize(8 + 2 * (ndigits - groups.len()), 0);
    for g in groups.iter().rev() {
        out.extend_from_slice(&g.to_be_bytes());
    }
    Some(out)
}

/// (year, month, day, hour, minute, second, microsecond) of Unix microseconds, UTC.
fn civil(us: i64) -> (i32, u8, u8, u8, u8, u8, u32) {
    let days = us.div_euclid(86_400_000_000);
    let rem = us.rem_euclid(86_400_000_000);
    // Howard Hinnant's days_from_civil, inverted.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u8;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
    let year = (yoe + era * 400 + if month <= 2 { 1 } else { 0 }) as i32;
    let secs = rem / 1_000_000;
    (year, month, day, (secs / 3600) as u8, (secs / 60 % 60) as u8, (secs % 60) as u8,
     (rem % 1_000_000) as u32)
}

// --- The COPY tuple ------------------------------------------------------------------------

struct Tuple(Vec<u8>);

impl Tuple {
    fn field(&mut self, b: &[u8]) {
        self.0.extend_from_slice(&(b.len() as i32).to_be_bytes());
        self.0.extend_from_slice(b);
    }
    fn null(&mut self) {
        self.0.extend_from_slice(&(-1i32).to_be_bytes());
    }
    fn opt_field(&mut self, b: Option<&[u8]>) {
        match b {
            Some(b) => self.field(b),
            None => self.null(),
        }
    }
    fn int4(&mut self, v: i32) {
        self.field(&v.to_be_bytes());
    }
    fn int8(&mut self, v: i64) {
        self.field(&v.to_be_bytes());
    }
    fn float8(&mut self, v: Option<f64>) {
        match v {
            Some(v) => self.field(&v.to_be_bytes()),
            None => self.null(),
        }
    }
    fn boolean(&mut self, v: bool) {
        self.field(&[v as u8]);
    }
    fn timestamptz(&mut self, us: i64) {
        self.int8(us - PG_EPOCH_US);
    }
}

// --- Python values ------------------------------------------------------------------------

static UUID_TYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static SAFE_UNKNOWN: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// A `uuid.UUID` equal to `uuid.UUID(text)`, made as `UUID.__init__` leaves it: its `int` and
/// `is_safe` slots set with `object.__setattr__` (UUID's own refuses), on an instance from
/// `object.__new__(UUID)` (UUID has no `__new__`), without parsing the text again in Python.
fn py_uuid<'py>(py: Python<'py>, raw: &[u8; 16]) -> PyResult<Bound<'py, PyAny>> {
    let ty = UUID_TYPE.import(py, "uuid", "UUID")?;
    let safe = SAFE_UNKNOWN.get_or_try_init(py, || -> PyResult<_> {
        Ok(py.import("uuid")?.getattr("SafeUUID")?.getattr("unknown")?.unbind())
    })?;
    let int = u128::from_be_bytes(*raw).into_pyobject(py)?;
    unsafe {
        let tp = ty.as_type_ptr();
        let alloc = (*tp).tp_alloc.unwrap_or(ffi::PyType_GenericAlloc);
        let u = Bound::from_owned_ptr_or_err(py, alloc(tp, 0))?;
        for (name, value) in [(intern!(py, "int"), int.as_ptr()),
                              (intern!(py, "is_safe"), safe.as_ptr())] {
            if ffi::PyObject_GenericSetAttr(u.as_ptr(), name.as_ptr(), value) < 0 {
                return Err(PyErr::fetch(py));
            }
        }
        Ok(u)
    }
}

fn py_datetime<'py>(py: Python<'py>, us: i64) -> PyResult<Bound<'py, PyAny>> {
    let (y, mo, d, h, mi, s, f) = civil(us);
    let utc = PyTzInfo::utc(py)?;
    Ok(PyDateTime::new(py, y, mo, d, h, mi, s, f, Some(&utc))?.into_any())
}

fn opt_str<'py>(py: Python<'py>, v: Option<&str>) -> Bound<'py, PyAny> {
    match v {
        Some(s) => PyString::new(py, s).into_any(),
        None => py.None().into_bound(py),
    }
}

fn opt_bytes<'py>(py: Python<'py>, v: Option<&[u8]>) -> Bound<'py, PyAny> {
    match v {
        Some(b) => PyBytes::new(py, b).into_any(),
        None => py.None().into_bound(py),
    }
}

fn opt_into<'py, T: IntoPyObject<'py>>(py: Python<'py>, v: Option<T>) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Some(v) => v.into_bound_py_any(py)?,
        None => py.None().into_bound(py),
    })
}

fn int<'py>(py: Python<'py>, v: i64) -> Bound<'py, PyAny> {
    v.into_pyobject(py).expect("int").into_any()
}

fn boolean<'py>(py: Python<'py>, v: bool) -> Bound<'py, PyAny> {
    v.into_pyobject(py).expect("bool").to_owned().into_any()
}

/// One message: `(row, copy_tuple, leaf_hash)`, or None for the pure path to decide.
fn decode_one<'py>(py: Python<'py>, value: &Bound<'py, PyAny>, partition: &Bound<'py, PyAny>,
                   offset: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let Ok(value_bytes) = value.cast::<PyBytes>() else { return Ok(None) };
    let (Ok(part), Ok(off)) = (partition.extract::<i32>(), offset.extract::<i64>()) else {
        return Ok(None);
    };
    // Exact ints only: a bool or an int subclass is the pure path's to turn into a row.
    if !partition.get_type().is(&py.get_type::<pyo3::types::PyInt>())
        || !offset.get_type().is(&py.get_type::<pyo3::types::PyInt>())
    {
        return Ok(None);
    }
    let data = value_bytes.as_bytes();
    let Some(r) = read_record(data) else { return Ok(None) };
    let Some(event_id) = uuid_bytes(r.event_id) else { return Ok(None) };
    if !(MIN_US..=MAX_US).contains(&r.occurred_at) || !(MIN_US..=MAX_US).contains(&r.captured_at) {
        return Ok(None); // the pure path's datetime overflows
    }
    let seed = match r.seed {
        None => None,
        Some(s) => {
            let Some((neg, digits)) = seed_digits(s) else { return Ok(None) };
            let Some(numeric) = numeric_binary(neg, digits) else { return Ok(None) };
            Some((s, numeric))
        }
    };
    let key_id = match r.key_id {
        None => None,
        Some(k) => {
            let Some(b) = key_id_bytes(k) else { return Ok(None) };
            Some(b)
        }
    };

    let mut t = Tuple(Vec::with_capacity(data.len() * 2 + 512));
    t.0.extend_from_slice(&COLUMNS.to_be_bytes());
    t.int4(part);
    t.int8(off);
    t.field(r.stream.as_bytes());
    t.int8(r.seq);
    t.field(&event_id);
    t.field(r.schema_version.as_bytes());
    t.timestamptz(r.occurred_at);
    t.int8(r.occurred_at);
    t.timestamptz(r.captured_at);
    t.field(r.content_key);
    t.field(r.prev_digest);
    t.field(r.record_digest);
    t.opt_field(r.response_digest);
    t.opt_field(r.output_digest);
    t.opt_field(r.input_digest);
    t.opt_field(r.prompt_digest);
    t.field(r.outcome.as_bytes());
    t.field(r.provider_name.as_bytes());
    t.field(r.provider_endpoint.as_bytes());
    t.opt_field(r.provider_api_version.map(str::as_bytes));
    t.opt_field(r.model_id.map(str::as_bytes));
    t.opt_field(r.response_model.map(str::as_bytes));
    t.opt_field(r.fingerprint.map(str::as_bytes));
    t.opt_field(r.params.map(str::as_bytes));
    match r.http_status {
        Some(v) => t.int4(v),
        None => t.null(),
    }
    t.opt_field(r.response_content_type.map(str::as_bytes));
    t.opt_field(seed.as_ref().map(|(_, n)| n.as_slice()));
    t.float8(r.temperature);
    t.float8(r.top_p);
    t.boolean(r.deterministic);
    t.field(r.request_policy.as_bytes());
    t.boolean(r.streamed);
    t.boolean(r.closed_early);
    t.boolean(r.truncated);
    t.field(r.writer_id.as_bytes());
    t.int8(r.request_length);
    match r.response_length {
        Some(v) => t.int8(v),
        None => t.null(),
    }
    t.opt_field(r.request_bytes);
    t.opt_field(r.response_bytes);
    t.opt_field(r.error_bytes);
    t.opt_field(r.input_bytes);
    t.opt_field(r.prompt_bytes);
    t.opt_field(key_id.as_deref());
    t.opt_field(r.trace.map(|(trace_id, _)| trace_id));
    t.opt_field(r.trace.map(|(_, span_id)| span_id));
    t.boolean(false); // mapped: a mapped record is the pure path's
    t.null(); // corroborates
    t.field(data);

    let seed_py = match &seed {
        None => py.None().into_bound(py),
        Some((s, _)) => match s.parse::<i64>() {
            Ok(v) => int(py, v),
            Err(_) => py.get_type::<pyo3::types::PyInt>().call1((*s,))?,
        },
    };
    let row: [Bound<'py, PyAny>; 48] = [
        partition.clone(),
        offset.clone(),
        PyString::new(py, r.stream).into_any(),
        int(py, r.seq),
        py_uuid(py, &event_id)?,
        PyString::new(py, r.schema_version).into_any(),
        py_datetime(py, r.occurred_at)?,
        int(py, r.occurred_at),
        py_datetime(py, r.captured_at)?,
        PyBytes::new(py, r.content_key).into_any(),
        PyBytes::new(py, r.prev_digest).into_any(),
        PyBytes::new(py, r.record_digest).into_any(),
        opt_bytes(py, r.response_digest),
        opt_bytes(py, r.output_digest),
        opt_bytes(py, r.input_digest),
        opt_bytes(py, r.prompt_digest),
        PyString::new(py, r.outcome).into_any(),
        PyString::new(py, r.provider_name).into_any(),
        PyString::new(py, r.provider_endpoint).into_any(),
        opt_str(py, r.provider_api_version),
        opt_str(py, r.model_id),
        opt_str(py, r.response_model),
        opt_str(py, r.fingerprint),
        opt_str(py, r.params),
        opt_into(py, r.http_status)?,
        opt_str(py, r.response_content_type),
        seed_py,
        opt_into(py, r.temperature)?,
        opt_into(py, r.top_p)?,
        boolean(py, r.deterministic),
        PyString::new(py, r.request_policy).into_any(),
        boolean(py, r.streamed),
        boolean(py, r.closed_early),
        boolean(py, r.truncated),
        PyString::new(py, r.writer_id).into_any(),
        int(py, r.request_length),
        opt_into(py, r.response_length)?,
        opt_bytes(py, r.request_bytes),
        opt_bytes(py, r.response_bytes),
        opt_bytes(py, r.error_bytes),
        opt_bytes(py, r.input_bytes),
        opt_bytes(py, r.prompt_bytes),
        opt_bytes(py, key_id.as_deref()),
        opt_bytes(py, r.trace.map(|(trace_id, _)| trace_id)),
        opt_bytes(py, r.trace.map(|(_, span_id)| span_id)),
        boolean(py, false),
        py.None().into_bound(py),
        value.clone(),
    ];
    let leaf = leaf_of(r.record_digest, data);
    let out = PyTuple::new(py, [
        PyTuple::new(py, row)?.into_any(),
        PyBytes::new(py, &t.0).into_any(),
        PyBytes::new(py, &leaf).into_any(),
    ])?;
    Ok(Some(out))
}

/// The tree's leaf hash of a record (`merkle.record_leaf_hash`) from its `record_digest` and
/// its bytes: SHA-256(0x00 || LEAF_LABEL || record_digest || SHA-256(record_bytes)).
fn leaf_of(record_digest: &[u8], record_bytes: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(LEAF_LABEL);
    h.update(record_digest);
    h.update(Sha256::digest(record_bytes));
    h.finalize().into()
}

/// `leaf_hash(record_digest, record_bytes)`: the leaf hash, or None for a digest that is not
/// 32 bytes (the pure path raises for it).
#[pyfunction]
fn leaf_hash<'py>(py: Python<'py>, record_digest: &[u8], record_bytes: &[u8]) -> Option<Bound<'py, PyBytes>> {
    (record_digest.len() == DIGEST_SIZE).then(|| PyBytes::new(py, &leaf_of(record_digest, record_bytes)))
}

/// `decode(value, partition, offset)`: `(row, copy_tuple, leaf_hash)` of one log message, or
/// None when the pure path must decide (see the module docs).
#[pyfunction]
fn decode<'py>(py: Python<'py>, value: &Bound<'py, PyAny>, partition: &Bound<'py, PyAny>,
               offset: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyTuple>>> {
    decode_one(py, value, partition, offset)
}

/// `decode_batch(messages)`: `decode` of each `(value, partition, offset)`, as a list.
#[pyfunction]
fn decode_batch<'py>(py: Python<'py>, messages: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for m in messages.try_iter()? {
        let m = m?;
        let (value, partition, offset): (Bound<PyAny>, Bound<PyAny>, Bound<PyAny>) = m.extract()?;
        match decode_one(py, &value, &partition, &offset)? {
            Some(t) => out.append(t)?,
            None => out.append(py.None())?,
        }
    }
    Ok(out)
}

#[pymodule]
fn evidence_rows_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(decode, m)?)?;
    m.add_function(wrap_pyfunction!(decode_batch, m)?)?;
    m.add_function(wrap_pyfunction!(leaf_hash, m)?)?;
    let py = m.py();
    m.add("FINGERPRINTS",
          (PyBytes::new(py, &FP_2_2), PyBytes::new(py, &FP_2_1), PyBytes::new(py, &FP_2_0)))?;
    m.add("COLUMNS", COLUMNS)?;
    Ok(())
}
