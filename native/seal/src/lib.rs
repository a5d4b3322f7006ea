//! The writer's seal path, compiled: `evidence_seal_native.Kernel`.
//!
//! A twin of the pure Python path (`writer.core.validate` with `schemas._fastread`,
//! `writer.core.seal_capture` with `schemas.codec.encode_sealed`, `writer.checkpoints.
//! record_leaf`), for the common case only. `Kernel.check` answers `(stream, event_id,
//! record_fp)` for an intake message that the pure path would seal as it came (a canonical
//! plain CaptureEvent of a known version that passes every rule of the record contract, on its
//! stream's partition), and `None` for anything else: then the writer asks the pure path,
//! which words every rejection and repairs non-canonical bytes. So this module only has to be
//! right when it says yes; saying no is always safe. Encrypted captures are left to the pure
//! path too (their shape rules are `evidence_contract.envelope`'s), and so are captures
//! mapped from telemetry (record contract 2.2, `telemetry` set: rare, and their rules are
//! `writer.capture._check_telemetry`'s); a trace context (2.2) is checked here.
//!
//! `Kernel.seal` appends the Seal to an accepted message's body exactly as
//! `encode_sealed` does and returns the record, its `record_digest` and its Merkle leaf hash.
//! `tests/unit/test_native_seal.py` holds both paths to the same vectors, byte for byte.
//!
//! `AvroWriter` (module `avro`) is the compiled twin of the contract's canonical writer: a
//! capture's encode in the client (`evidence_contract.codec.encode`) takes it when built.

mod avro;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};
use sha2::{Digest, Sha256};

const MARKER: [u8; 2] = [0xc3, 0x01];
const HEADER: usize = 10;
/// CaptureEvent fingerprints this reader was written for, each with the EvidenceRecord
/// fingerprint its captures are sealed under (`schemas._avro.RECORD_FOR_CAPTURE`).
/// writer/native.py refuses the module unless the contract agrees.
const CAPTURE_2_2: [u8; 8] = [0x83, 0x61, 0xf2, 0x2a, 0x8a, 0x03, 0x93, 0x36];
const RECORD_2_2: [u8; 8] = [0xd3, 0x21, 0xf2, 0xab, 0x8d, 0x47, 0xb5, 0xd4];
const CAPTURE_2_1: [u8; 8] = [0xdc, 0xad, 0x4f, 0x6e, 0x8b, 0xfb, 0xc7, 0xde];
const RECORD_2_1: [u8; 8] = [0x59, 0x8d, 0x7a, 0x24, 0xf4, 0x1b, 0x92, 0x28];
const CAPTURE_2_0: [u8; 8] = [0x97, 0xda, 0xea, 0x93, 0xce, 0x13, 0xa2, 0x90];
const RECORD_2_0: [u8; 8] = [0x85, 0x4b, 0x3d, 0x02, 0xa9, 0x04, 0xfe, 0x84];
const LEAF_LABEL: &[u8] = b"evidence-store/v2 record\n";
const TRUNCATED_ERROR_BYTES: usize = 64 * 1024;
const MAX_SEED_DIGITS: usize = 4300;
const DIGEST_SIZE: usize = 32;
const TRACE_ID_SIZE: usize = 16;
const SPAN_ID_SIZE: usize = 8;

/// Not provably sealable as it came: the caller takes the pure path.
struct No;
type R<T> = Result<T, No>;

/// A strict reader of canonical Avro binary (the rules of `schemas._fastread`).
struct Reader<'a> {
    d: &'a [u8],
    p: usize,
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> R<u8> {
        let b = *self.d.get(self.p).ok_or(No)?;
        self.p += 1;
        Ok(b)
    }

    /// A minimal zig-zag varint of at most nine bytes.
    fn long(&mut self) -> R<i64> {
        let first = self.byte()?;
        let z: u64 = if first < 0x80 {
            first as u64
        } else {
            let mut n = (first & 0x7f) as u64;
            let mut shift = 7u32;
            let last;
            loop {
                let b = self.byte()?;
                n |= ((b & 0x7f) as u64) << shift;
                if b < 0x80 {
                    last = b;
                    break;
                }
                shift += 7;
                if shift >= 63 {
                    return Err(No);
                }
            }
            if last == 0 {
                return Err(No); // padded: the same value has a shorter encoding
            }
            n
        };
        Ok(((z >> 1) as i64) ^ -((z & 1) as i64))
    }

    fn int(&mut self) -> R<i32> {
        i32::try_from(self.long()?).map_err(|_| No)
    }

    fn boolean(&mut self) -> R<bool> {
        match self.byte()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(No),
        }
    }

    fn index(&mut self, n: i64) -> R<i64> {
        let i = self.long()?;
        if (0..n).contains(&i) {
            Ok(i)
        } else {
            Err(No)
        }
    }

    /// Avro union ["null", X]: is X there?
    fn present(&mut self) -> R<bool> {
        Ok(self.index(2)? == 1)
    }

    fn bytes(&mut self) -> R<&'a [u8]> {
        let n = self.long()?;
        if n < 0 {
            return Err(No);
        }
        let end = self.p.checked_add(n as usize).ok_or(No)?;
        let out = self.d.get(self.p..end).ok_or(No)?;
        self.p = end;
        Ok(out)
    }

    fn string(&mut self) -> R<&'a str> {
        std::str::from_utf8(self.bytes()?).map_err(|_| No)
    }

    fn opt_bytes(&mut self) -> R<Option<&'a [u8]>> {
        if self.present()? {
            Ok(Some(self.bytes()?))
        } else {
            Ok(None)
        }
    }

    fn opt_string(&mut self) -> R<Option<&'a str>> {
        if self.present()? {
            Ok(Some(self.string()?))
        } else {
            Ok(None)
        }
    }

    fn opt_long(&mut self) -> R<Option<i64>> {
        if self.present()? {
            Ok(Some(self.long()?))
        } else {
            Ok(None)
        }
    }

    fn opt_int(&mut self) -> R<Option<i32>> {
        if self.present()? {
            Ok(Some(self.int()?))
        } else {
            Ok(None)
        }
    }

    fn opt_double(&mut self) -> R<()> {
        if self.present()? {
            let raw = self.d.get(self.p..self.p + 8).ok_or(No)?;
            if f64::from_le_bytes(raw.try_into().map_err(|_| No)?).is_nan() {
                return Err(No); // its payload bits need not survive a round trip
            }
            self.p += 8;
        }
        Ok(())
    }
}

fn digest(prefix: u8, data: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update([prefix]);
    h.update(data);
    h.finalize().into()
}

fn is_digest(d: Option<&[u8]>) -> bool {
    d.map_or(true, |d| d.len() == DIGEST_SIZE)
}

fn valid_stream_id(s: &str) -> bool {
    (1..=128).contains(&s.len())
        && s.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b':' | b'-'))
}

fn valid_event_id(s: &str) -> bool {
    let b = s.as_bytes();
    let hex = |c: u8| c.is_ascii_digit() || (b'a'..=b'f').contains(&c);
    b.len() == 36
        && b.iter().enumerate().all(|(i, &c)| match i {
            8 | 13 | 18 | 23 => c == b'-',
            14 => c == b'7',
            19 => matches!(c, b'8' | b'9' | b'a' | b'b'),
            _ => hex(c),
        })
}

fn valid_seed(s: &str) -> bool {
    let digits = s.strip_prefix('-').unwrap_or(s).as_bytes();
    match digits {
        [b'0'] => true,
        [first, rest @ ..] => {
            (b'1'..=b'9').contains(first)
                && rest.len() < MAX_SEED_DIGITS
                && rest.iter().all(u8::is_ascii_digit)
        }
        [] => false,
    }
}

/// Kafka's murmur2 (`org.apache.kafka.common.utils.Utils.murmur2`).
fn murmur2(data: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = 0x9747_b28c ^ (data.len() as u32);
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]).wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let t = chunks.remainder();
    if t.len() == 3 {
        h ^= (t[2] as u32) << 16;
    }
    if t.len() >= 2 {
        h ^= (t[1] as u32) << 8;
    }
    if !t.is_empty() {
        h ^= t[0] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^ (h >> 15)
}

struct Accepted<'a> {
    stream: &'a str,
    event_id: &'a str,
    record_fp: &'static [u8; 8],
}

/// The whole of `writer.core.validate` for a message it would seal as it came; `No` for
/// every other message (the order of the rules does not matter here: all of them must hold).
fn accept<'a>(value: &'a [u8], key: Option<&[u8]>, limit: usize) -> R<Accepted<'a>> {
    if value.len() > limit || value.len() < HEADER || value[..2] != MARKER {
        return Err(No);
    }
    let fp = &value[2..HEADER];
    // Which optional fields the version appends: encryption (2.1 on), trace and telemetry (2.2).
    let (record_fp, has_encryption, has_trace) = if fp == CAPTURE_2_2 {
        (&RECORD_2_2, true, true)
    } else if fp == CAPTURE_2_1 {
        (&RECORD_2_1, true, false)
    } else if fp == CAPTURE_2_0 {
        (&RECORD_2_0, false, false)
    } else {
        return Err(No);
    };
    let mut r = Reader { d: value, p: HEADER };
    let version = r.string()?;
    let event_id = r.string()?;
    let stream = r.string()?;
    r.long()?; // captured_at
    let content_key = r.bytes()?;
    let request = r.opt_bytes()?;
    let request_length = r.long()?;
    let input_digest = r.opt_bytes()?;
    let input = r.opt_bytes()?;
    let prompt_digest = r.opt_bytes()?;
    let prompt = r.opt_bytes()?;
    // retrieval: empty is one 0x00; otherwise one block, its items, then 0x00.
    let chunks = r.long()?;
    let mut chunk_kept = false;
    if chunks != 0 {
        if chunks < 0 {
            return Err(No);
        }
        for _ in 0..chunks {
            r.string()?; // doc_id
            r.opt_string()?; // doc_version
            let chunk_digest = r.bytes()?;
            let chunk = r.opt_bytes()?;
            if chunk_digest.len() != DIGEST_SIZE {
                return Err(No);
            }
            if let Some(data) = chunk {
                chunk_kept = true;
                if digest(0x06, data) != chunk_digest {
                    return Err(No);
                }
            }
        }
        if r.byte()? != 0 {
            return Err(No);
        }
    }
    r.string()?; // provider.name
    r.string()?; // provider.endpoint
    r.opt_string()?; // provider.api_version
    r.opt_string()?; // model_id
    r.opt_string()?; // params
    r.opt_string()?; // fingerprint
    r.opt_string()?; // response_model
    r.opt_int()?; // http_status
    r.opt_string()?; // response_content_type
    let response = r.opt_bytes()?;
    let response_length = r.opt_long()?;
    let response_digest = r.opt_bytes()?;
    let output_digest = r.opt_bytes()?;
    let error = r.opt_bytes()?;
    let committed = r.index(3)? == 0; // outcome: COMMITTED, FAILED, UNKNOWN
    let seed = r.opt_string()?;
    r.opt_double()?; // replay.temperature
    r.opt_double()?; // replay.top_p
    let deterministic = r.boolean()?;
    r.string()?; // capture.library
    r.opt_string()?; // capture.host
    let value_policy = r.index(2)? == 0; // request_policy: VALUE, HASH_ONLY
    r.boolean()?; // capture.streamed
    r.boolean()?; // capture.closed_early
    let truncated = r.boolean()?;
    r.long()?; // capture.started_at
    r.opt_long()?; // capture.duration_us
    if has_encryption && r.present()? {
        return Err(No); // sealed content: the pure path checks its shape
    }
    // trace: a W3C trace context, in a 2.2 capture only (BAD_TRACE otherwise).
    let trace = if has_trace && r.present()? { Some((r.bytes()?, r.bytes()?)) } else { None };
    if has_trace && r.present()? {
        return Err(No); // mapped from telemetry: the pure path checks its rules
    }
    if r.p != value.len() {
        return Err(No);
    }

    // The rules of writer.core._check_semantics, every one of which must hold.
    let ok = matches!(version, "2.0" | "2.1" | "2.2")
        && valid_stream_id(stream)
        && key == Some(stream.as_bytes())
        && valid_event_id(event_id)
        && content_key.len() == DIGEST_SIZE
        && [input_digest, prompt_digest, response_digest, output_digest].into_iter().all(is_digest)
        && seed.map_or(true, valid_seed)
        && deterministic == seed.is_some()
        && trace.map_or(true, |(trace_id, span_id)| {
            version == "2.2"
                && trace_id.len() == TRACE_ID_SIZE
                && span_id.len() == SPAN_ID_SIZE
                && trace_id.iter().any(|&b| b != 0)
                && span_id.iter().any(|&b| b != 0)
        })
        && (!truncated
            || ([request, response, input, prompt].iter().all(Option::is_none)
                && !chunk_kept
                && error.map_or(true, |e| e.len() <= TRUNCATED_ERROR_BYTES)))
        && (!committed
            || (response_digest.is_some()
                && response_length.is_some()
                && (truncated || response.is_some())))
        && (response.is_none() || response_digest.is_some())
        && response_length.is_none() == response_digest.is_none()
        && !(value_policy && request.is_none() && !truncated)
        && (input.is_none() || input_digest.is_some())
        && (prompt.is_none() || prompt_digest.is_some())
        && request_length >= 0
        && request.map_or(true, |b| b.len() as i64 == request_length)
        && response_length.map_or(true, |n| n >= 0)
        && response.map_or(true, |b| Some(b.len() as i64) == response_length)
        && request.map_or(true, |b| digest(0x00, b) == content_key)
        && response.map_or(true, |b| Some(&digest(0x01, b)[..]) == response_digest)
        && input.map_or(true, |b| Some(&digest(0x02, b)[..]) == input_digest)
        && prompt.map_or(true, |b| Some(&digest(0x03, b)[..]) == prompt_digest);
    if !ok {
        return Err(No);
    }
    Ok(Accepted { stream, event_id, record_fp })
}

/// Append the Avro zig-zag varint of `n` (the seal's encode and `avro::AvroWriter` alike).
pub(crate) fn varint(out: &mut Vec<u8>, n: i64) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z > 0x7f {
        out.push((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn avro_string(out: &mut Vec<u8>, s: &str) {
    varint(out, s.len() as i64);
    out.extend_from_slice(s.as_bytes());
}

/// The compiled seal path of one writer (its identity is the same in every Seal).
#[pyclass(frozen, module = "evidence_seal_native")]
struct Kernel {
    /// The Avro binary of the Seal's `writer` record.
    writer: Vec<u8>,
    /// The EvidenceRecord fingerprints `check` answers, made once.
    record_2_2: Py<PyBytes>,
    record_2_1: Py<PyBytes>,
    record_2_0: Py<PyBytes>,
}

#[pymethods]
impl Kernel {
    #[new]
    fn new(py: Python<'_>, writer_id: &str, transactional_id: &str, version: &str) -> Self {
        let mut writer = Vec::new();
        for s in [writer_id, transactional_id, version] {
            avro_string(&mut writer, s);
        }
        Kernel {
            writer,
            record_2_2: PyBytes::new(py, &RECORD_2_2).unbind(),
            record_2_1: PyBytes::new(py, &RECORD_2_1).unbind(),
            record_2_0: PyBytes::new(py, &RECORD_2_0).unbind(),
        }
    }

    /// `(stream, event_id, record_fp)` of an intake message the pure path would seal as it
    /// came, on `partition` of `partitions` (0: not checked); `None` for anything else.
    #[pyo3(signature = (value, key, limit, partitions, partition))]
    fn check<'py>(
        &self,
        py: Python<'py>,
        value: &Bound<'py, PyAny>,
        key: &Bound<'py, PyAny>,
        limit: i64,
        partitions: i64,
        partition: i64,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let Ok(value) = value.cast::<PyBytes>() else {
            return Ok(None);
        };
        let key = match key.cast::<PyBytes>() {
            Ok(k) => Some(k.as_bytes()),
            Err(_) => None,
        };
        let Ok(limit) = usize::try_from(limit) else {
            return Ok(None);
        };
        let Ok(got) = accept(value.as_bytes(), key, limit) else {
            return Ok(None);
        };
        if partitions > 0 && ((murmur2(got.stream.as_bytes()) & 0x7fff_ffff) as i64) % partitions != partition {
            return Ok(None); // WRONG_PARTITION: the pure path words it
        }
        let items: [Bound<'py, PyAny>; 3] = [
            PyString::new(py, got.stream).into_any(),
            PyString::new(py, got.event_id).into_any(),
            if got.record_fp == &RECORD_2_2 {
                &self.record_2_2
            } else if got.record_fp == &RECORD_2_1 {
                &self.record_2_1
            } else {
                &self.record_2_0
            }
            .bind(py)
                .clone()
                .into_any(),
        ];
        Ok(Some(PyTuple::new(py, items)?))
    }

    /// `append_leaf(nodes, size, leaf)`, the module's function, as a method: what the writer
    /// appends each sealed record's leaf to its stream's compact range with.
    fn append_leaf(&self, py: Python<'_>, nodes: &Bound<'_, PyList>, size: u64, leaf: &[u8]) -> PyResult<()> {
        append_leaf(py, nodes, size, leaf)
    }

    /// `(record, record_digest, leaf_hash)`: the EvidenceRecord sealing the body of `value`
    /// (accepted by `check`) with this seal, as `schemas.codec.encode_sealed` writes it.
    #[pyo3(signature = (value, record_fp, prev_digest, seq, occurred_at, partition, offset))]
    #[allow(clippy::too_many_arguments)]
    fn seal<'py>(
        &self,
        py: Python<'py>,
        value: &[u8],
        record_fp: &[u8],
        prev_digest: &[u8],
        seq: i64,
        occurred_at: i64,
        partition: i32,
        offset: i64,
    ) -> PyResult<Bound<'py, PyTuple>> {
        if value.len() < HEADER || record_fp.len() != 8 || prev_digest.len() != DIGEST_SIZE
            || seq < 0 || occurred_at < 0
        {
            return Err(pyo3::exceptions::PyValueError::new_err("not a sealable capture or seal"));
        }
        let body = &value[HEADER..];
        let mut h = Sha256::new();
        h.update([0x05]);
        h.update(prev_digest);
        h.update((seq as u64).to_be_bytes());
        h.update((occurred_at as u64).to_be_bytes());
        h.update(body);
        let record_digest: [u8; 32] = h.finalize().into();

        let mut tail = Vec::with_capacity(2 * DIGEST_SIZE + self.writer.len() + 40);
        varint(&mut tail, seq);
        varint(&mut tail, occurred_at);
        tail.push(0x40); // a digest is Avro bytes: the length 32, zig-zag
        tail.extend_from_slice(prev_digest);
        tail.push(0x40);
        tail.extend_from_slice(&record_digest);
        tail.extend_from_slice(&self.writer);
        varint(&mut tail, partition as i64);
        varint(&mut tail, offset);

        // The record is written straight into the bytes object, and hashed there.
        let mut record_sha = [0u8; 32];
        let record = PyBytes::new_with(py, HEADER + body.len() + tail.len(), |out| {
            out[..2].copy_from_slice(&MARKER);
            out[2..HEADER].copy_from_slice(record_fp);
            out[HEADER..HEADER + body.len()].copy_from_slice(body);
            out[HEADER + body.len()..].copy_from_slice(&tail);
            record_sha = Sha256::digest(&*out).into();
            Ok(())
        })?;
        let mut l = Sha256::new();
        l.update([0x00]);
        l.update(LEAF_LABEL);
        l.update(record_digest);
        l.update(record_sha);
        let leaf: [u8; 32] = l.finalize().into();
        let items: [Bound<'py, PyAny>; 3] = [
            record.into_any(),
            PyBytes::new(py, &record_digest).into_any(),
            PyBytes::new(py, &leaf).into_any(),
        ];
        PyTuple::new(py, items)
    }
}

/// Append `leaf` to the compact range `nodes` of `size` leaves, in place, as
/// `schemas.merkle.CompactRange.append` does: each trailing set bit of `size` is a perfect
/// subtree the new node merges with (RFC 9162's SHA-256(0x01 || left || right)). Everything is
/// read and checked before the list changes, so an error leaves it as it was.
#[pyfunction]
fn append_leaf(py: Python<'_>, nodes: &Bound<'_, PyList>, size: u64, leaf: &[u8]) -> PyResult<()> {
    let bad = |m: &str| Err(pyo3::exceptions::PyValueError::new_err(m.to_string()));
    if leaf.len() != DIGEST_SIZE {
        return bad("a leaf hash is 32 bytes");
    }
    let len = nodes.len();
    if len != size.count_ones() as usize {
        return bad("the nodes are not a compact range of that size");
    }
    let merges = size.trailing_ones() as usize;
    let mut node = [0u8; DIGEST_SIZE];
    node.copy_from_slice(leaf);
    for i in (len - merges..len).rev() {
        let item = nodes.get_item(i)?;
        let Ok(left) = item.cast::<PyBytes>() else {
            return bad("a node is not bytes");
        };
        let left = left.as_bytes();
        if left.len() != DIGEST_SIZE {
            return bad("a node is 32 bytes");
        }
        let mut h = Sha256::new();
        h.update([0x01]);
        h.update(left);
        h.update(node);
        node = h.finalize().into();
    }
    if merges > 0 {
        nodes.del_slice(len - merges, len)?;
    }
    nodes.append(PyBytes::new(py, &node))
}

/// Kafka's murmur2 keyed partition of `key` (for the tests against `partition_for`).
#[pyfunction]
fn partition_for(key: &[u8], partitions: u32) -> u32 {
    (murmur2(key) & 0x7fff_ffff) % partitions
}

#[pymodule]
fn evidence_seal_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Kernel>()?;
    m.add_class::<avro::AvroWriter>()?;
    m.add_function(wrap_pyfunction!(partition_for, m)?)?;
    m.add_function(wrap_pyfunction!(append_leaf, m)?)?;
    let pairs: [(&[u8], &[u8]); 3] =
        [(&CAPTURE_2_2, &RECORD_2_2), (&CAPTURE_2_1, &RECORD_2_1), (&CAPTURE_2_0, &RECORD_2_0)];
    let py = m.py();
    let fps = pyo3::types::PyDict::new(py);
    for (c, r) in pairs {
        fps.set_item(PyBytes::new(py, c), PyBytes::new(py, r))?;
    }
    m.add("RECORD_FOR_CAPTURE", fps)?;
    m.add("LEAF_LABEL", PyBytes::new(py, LEAF_LABEL))?;
    Ok(())
}
