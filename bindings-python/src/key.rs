//! Cache keys: Python objects to the bytes the cache stores, and back.
//!
//! Owns the key encoding and nothing else (no cache access). A non-empty
//! `str` is stored as its UTF-8 bytes, with no copy and no tag: the common
//! case costs nothing. Every other key is [`TAG`] (0xFF, a byte that never
//! begins valid UTF-8, so it cannot collide with a `str`) followed by a
//! tagged encoding:
//!
//! | value | encoding |
//! |---|---|
//! | `str` | `s`, length byte, UTF-8 |
//! | `bytes` (also `bytearray`, `memoryview`) | `b`, length byte, bytes |
//! | `int` (and `bool`, and an integral `float`) | `i`, length byte, minimal little-endian two's complement |
//! | other `float` | `f`, 8 bytes (NaNs are one key) |
//! | `None` | `n` |
//! | `tuple` | `t`, element count, each element tagged |
//! | typed only: `bool` / integral `float` | `B` + 0 or 1 / `f` + 8 bytes |
//!
//! So keys follow Python's equality where a dict does: `1`, `1.0` and
//! `True` are one key, `"a"` and `b"a"` are two, a `str` subclass (a
//! `str` enum member) is the `str` it equals. With `typed` (the
//! decorator's `typed=True`), `bool`, `int` and `float` stay apart, as in
//! `functools.lru_cache(typed=True)`. An encoding longer than
//! [`MAX_KEY_LEN`] bytes is [`KeyError::TooLong`]; reads treat that as a
//! miss, writes as a `ValueError`.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyFloat, PyInt, PyMemoryView, PyString, PyTuple};
use segcache::MAX_KEY_LEN;

use crate::convert::{bytes_of, small_int, str_bytes, type_name};

/// First byte of every key that is not a non-empty `str`.
pub const TAG: u8 = 0xFF;
const T_STR: u8 = b's';
const T_BYTES: u8 = b'b';
const T_INT: u8 = b'i';
const T_FLOAT: u8 = b'f';
const T_NONE: u8 = b'n';
const T_TUPLE: u8 = b't';
const T_BOOL: u8 = b'B';

/// The key types, for error messages.
pub const KEY_TYPES: &str = "str, bytes, int, float, bool, None or a tuple of these";

/// Why a key could not be encoded.
#[derive(Debug)]
pub enum KeyError {
    /// Not one of [`KEY_TYPES`]; the type's name.
    Unsupported(String),
    /// The encoding is longer than [`MAX_KEY_LEN`].
    TooLong,
    /// Python raised (a `str` with lone surrogates, say).
    Py(PyErr),
}

impl From<PyErr> for KeyError {
    fn from(e: PyErr) -> Self {
        KeyError::Py(e)
    }
}

impl KeyError {
    /// The Python exception for a write (or a lookup of an unsupported type).
    pub fn into_py(self) -> PyErr {
        match self {
            KeyError::Unsupported(t) => {
                PyTypeError::new_err(format!("unsupported key type {t}: keys are {KEY_TYPES}"))
            }
            KeyError::TooLong => PyValueError::new_err(format!(
                "key is longer than {MAX_KEY_LEN} bytes once encoded (a str key may have \
                 {MAX_KEY_LEN} bytes of UTF-8; other keys take a few bytes more)"
            )),
            KeyError::Py(e) => e,
        }
    }
}

/// Room to build an encoded key in, on the caller's stack (spilling to the
/// heap only past [`MAX_KEY_LEN`], for the decorator, which hashes such
/// keys). The encoders return a slice of it, or of a `str`'s own UTF-8.
// repr(C), `buf` last: with the fields free to move, LLVM stored `len`
// and the uninitialised `buf` as one 258-byte memset per call.
#[repr(C)]
pub struct KeyBuf {
    len: usize,
    spill: Option<Vec<u8>>,
    buf: std::mem::MaybeUninit<[u8; MAX_KEY_LEN]>,
}

impl Default for KeyBuf {
    fn default() -> Self {
        Self::new()
    }
}

impl KeyBuf {
    /// An empty buffer (not zeroed: only what is written is read).
    #[inline]
    pub fn new() -> Self {
        KeyBuf {
            buf: std::mem::MaybeUninit::uninit(),
            len: 0,
            spill: None,
        }
    }

    /// What has been written.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        match &self.spill {
            Some(v) => v,
            // SAFETY: `push` initialised the first `len` bytes (len <=
            // MAX_KEY_LEN whenever there is no spill).
            None => unsafe {
                debug_assert!(self.len <= MAX_KEY_LEN);
                std::slice::from_raw_parts(self.buf.as_ptr().cast::<u8>(), self.len)
            },
        }
    }

    /// Empties the buffer for reuse.
    pub fn clear(&mut self) {
        self.len = 0;
        self.spill = None;
    }

    #[inline]
    fn push(&mut self, bytes: &[u8]) -> Result<(), KeyError> {
        let end = self.len + bytes.len();
        if let Some(v) = &mut self.spill {
            v.extend_from_slice(bytes);
        } else if end <= MAX_KEY_LEN {
            // SAFETY: `end <= MAX_KEY_LEN`, so the range is inside `buf`.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    bytes.as_ptr(),
                    self.buf.as_mut_ptr().cast::<u8>().add(self.len),
                    bytes.len(),
                );
            }
        } else {
            if end > 1 << 16 {
                return Err(KeyError::TooLong);
            }
            let mut v = Vec::with_capacity(end * 2);
            v.extend_from_slice(self.bytes());
            v.extend_from_slice(bytes);
            self.spill = Some(v);
        }
        self.len = end;
        Ok(())
    }

    /// Whether the encoding is longer than the cache takes.
    pub fn too_long(&self) -> bool {
        self.len > MAX_KEY_LEN
    }

    #[inline]
    fn byte(&mut self, b: u8) -> Result<(), KeyError> {
        self.push(&[b])
    }

    /// A tag, a length byte and the bytes.
    fn sized(&mut self, tag: u8, bytes: &[u8]) -> Result<(), KeyError> {
        if bytes.len() >= 255 {
            // Longer than a key can be: only the decorator goes on (to
            // hash it), with a four-byte length after the marker 255.
            self.push(&[tag, 255])?;
            self.push(&(bytes.len() as u32).to_le_bytes())?;
            return self.push(bytes);
        }
        self.push(&[tag, bytes.len() as u8])?;
        self.push(bytes)
    }

    /// A tuple tag and element count (255 and four more bytes beyond 254:
    /// such a key is too long to store, only the decorator hashes it).
    fn count(&mut self, n: usize) -> Result<(), KeyError> {
        if n < 255 {
            return self.push(&[T_TUPLE, n as u8]);
        }
        self.push(&[T_TUPLE, 255])?;
        self.push(&(n as u32).to_le_bytes())
    }

    fn int(&mut self, n: i64) -> Result<(), KeyError> {
        let le = n.to_le_bytes();
        // Minimal two's complement: drop high bytes that only repeat the sign.
        let mut len = 8;
        while len > 1 {
            let top = le[len - 1];
            let next_sign = le[len - 2] & 0x80;
            if (top == 0 && next_sign == 0) || (top == 0xFF && next_sign != 0) {
                len -= 1;
            } else {
                break;
            }
        }
        self.sized(T_INT, &le[..len])
    }

    fn big_int(&mut self, n: &Bound<'_, PyAny>) -> Result<(), KeyError> {
        // Beyond i64: `int.to_bytes` in the same minimal little-endian form.
        let bits: usize = n.call_method0("bit_length")?.extract()?;
        let len = bits / 8 + 1;
        if len > 1 << 12 {
            return Err(KeyError::TooLong);
        }
        let kwargs = pyo3::types::PyDict::new(n.py());
        kwargs.set_item("signed", true)?;
        let bytes = n.call_method("to_bytes", (len, "little"), Some(&kwargs))?;
        self.sized(
            T_INT,
            bytes.cast::<PyBytes>().map_err(PyErr::from)?.as_bytes(),
        )
    }

    fn float(&mut self, f: &Bound<'_, PyFloat>, typed: bool) -> Result<(), KeyError> {
        let x = f.value();
        if x.is_finite() && x.fract() == 0.0 && !typed {
            // An integral float equals the int it converts to.
            if x.abs() < 9.0e18 {
                return self.int(x as i64);
            }
            return self.big_int(&f.call_method0("__int__")?);
        }
        let x = if x.is_nan() {
            f64::NAN
        } else if x == 0.0 {
            0.0 // -0.0 == 0.0
        } else {
            x
        };
        self.byte(T_FLOAT)?;
        self.push(&x.to_bits().to_le_bytes())
    }

    /// Appends the tagged encoding of `obj`.
    fn tagged(&mut self, obj: &Bound<'_, PyAny>, typed: bool, depth: u32) -> Result<(), KeyError> {
        if let Ok(s) = obj.cast::<PyString>() {
            return self.sized(T_STR, str_bytes(s)?);
        }
        if let Ok(b) = obj.cast::<PyBytes>() {
            return self.sized(T_BYTES, bytes_of(b));
        }
        if let Ok(b) = obj.cast::<PyBool>() {
            let v = b.is_true();
            return if typed {
                self.push(&[T_BOOL, v as u8])
            } else {
                self.int(v as i64)
            };
        }
        if obj.is_instance_of::<PyInt>() {
            return match small_int(obj) {
                Some(n) => self.int(n),
                None => self.big_int(obj),
            };
        }
        if let Ok(f) = obj.cast::<PyFloat>() {
            return self.float(f, typed);
        }
        if obj.is_none() {
            return self.byte(T_NONE);
        }
        if let Ok(t) = obj.cast::<PyTuple>() {
            if depth > 32 {
                return Err(KeyError::TooLong);
            }
            self.count(t.len())?;
            for item in t.iter() {
                self.tagged(&item, typed, depth + 1)?;
            }
            return Ok(());
        }
        if let Ok(b) = obj.cast::<PyByteArray>() {
            return self.sized(T_BYTES, &b.to_vec());
        }
        if obj.cast::<PyMemoryView>().is_ok() {
            let copy = obj.call_method0("tobytes")?;
            return self.sized(
                T_BYTES,
                copy.cast::<PyBytes>().map_err(PyErr::from)?.as_bytes(),
            );
        }
        Err(KeyError::Unsupported(type_name(obj)))
    }
}

/// Encodes a key (`typed`: keep `bool`, `int` and `float` apart), in
/// `kb` or, for a `str`, as the string's own UTF-8.
#[inline(always)]
pub fn encode<'a>(
    obj: &'a Bound<'_, PyAny>,
    typed: bool,
    kb: &'a mut KeyBuf,
) -> Result<&'a [u8], KeyError> {
    if let Ok(s) = obj.cast_exact::<PyString>() {
        let utf8 = str_bytes(s)?;
        if !utf8.is_empty() {
            if utf8.len() > MAX_KEY_LEN {
                return Err(KeyError::TooLong);
            }
            return Ok(utf8);
        }
    }
    encode_tagged(obj, typed, kb)
}

/// [`encode`] past its `str` fast path.
#[inline(never)]
fn encode_tagged<'a>(
    obj: &'a Bound<'_, PyAny>,
    typed: bool,
    kb: &'a mut KeyBuf,
) -> Result<&'a [u8], KeyError> {
    // A `str` subclass (a `str` enum, say) is the `str` it equals, as in
    // a dict: its UTF-8, untagged.
    if let Ok(s) = obj.cast::<PyString>() {
        let utf8 = str_bytes(s)?;
        if !utf8.is_empty() {
            if utf8.len() > MAX_KEY_LEN {
                return Err(KeyError::TooLong);
            }
            return Ok(utf8);
        }
    }
    kb.byte(TAG)?;
    kb.tagged(obj, typed, 0)?;
    if kb.too_long() {
        return Err(KeyError::TooLong);
    }
    Ok(kb.bytes())
}

/// Encodes a decorated call's key into `kb`: the tuple `(name, args)` or,
/// with keyword arguments, `(name, args, ((kw, value), ...))` sorted by
/// keyword. The result may be [`KeyBuf::too_long`]: the decorator hashes
/// it then.
pub fn encode_call(
    kb: &mut KeyBuf,
    name: &str,
    args: &Bound<'_, PyTuple>,
    kwargs: Option<&Bound<'_, pyo3::types::PyDict>>,
    typed: bool,
) -> Result<(), KeyError> {
    let kwargs = kwargs.filter(|d| !d.is_empty());
    kb.push(&[TAG, T_TUPLE, if kwargs.is_some() { 3 } else { 2 }])?;
    kb.sized(T_STR, name.as_bytes())?;
    kb.count(args.len())?;
    for item in args.iter() {
        kb.tagged(&item, typed, 1)?;
    }
    if let Some(kw) = kwargs {
        let mut pairs: Vec<(String, Bound<'_, PyAny>)> = Vec::with_capacity(kw.len());
        for (name, value) in kw.iter() {
            pairs.push((name.extract()?, value));
        }
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        kb.count(pairs.len())?;
        for (name, value) in &pairs {
            kb.push(&[T_TUPLE, 2])?;
            kb.sized(T_STR, name.as_bytes())?;
            kb.tagged(value, typed, 2)?;
        }
    }
    Ok(())
}

/// Whether `key` (encoded) is a decorated call's key for function `name`.
pub fn is_call_of(key: &[u8], name: &str) -> bool {
    key.len() > 5 + name.len()
        && key[0] == TAG
        && key[1] == T_TUPLE
        && (key[2] == 2 || key[2] == 3)
        && key[3] == T_STR
        && key[4] as usize == name.len()
        && &key[5..5 + name.len()] == name.as_bytes()
}

/// Encodes the key `(name, value)` into `kb` (the decorator's key for a
/// `key=` function's result, or for a hash digest).
pub fn encode_named(
    kb: &mut KeyBuf,
    name: &str,
    value: &Bound<'_, PyAny>,
    typed: bool,
) -> Result<(), KeyError> {
    kb.push(&[TAG, T_TUPLE, 2])?;
    kb.sized(T_STR, name.as_bytes())?;
    kb.tagged(value, typed, 1)
}

/// The Python object a stored key stands for (`None` if the bytes are not
/// an encoding this module makes, say written by another program into a
/// shared datapool: then they come back as `bytes`).
pub fn decode<'py>(py: Python<'py>, key: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    if key.first() != Some(&TAG) {
        if let Ok(s) = std::str::from_utf8(key) {
            return Ok(PyString::new(py, s).into_any());
        }
        return Ok(PyBytes::new(py, key).into_any());
    }
    let mut pos = 1;
    match decode_tagged(py, key, &mut pos) {
        Ok(obj) if pos == key.len() => Ok(obj),
        _ => Ok(PyBytes::new(py, key).into_any()),
    }
}

fn take<'k>(key: &'k [u8], pos: &mut usize, n: usize) -> PyResult<&'k [u8]> {
    let out = key
        .get(*pos..*pos + n)
        .ok_or_else(|| PyValueError::new_err("truncated key"))?;
    *pos += n;
    Ok(out)
}

fn decode_tagged<'py>(py: Python<'py>, key: &[u8], pos: &mut usize) -> PyResult<Bound<'py, PyAny>> {
    let tag = take(key, pos, 1)?[0];
    Ok(match tag {
        T_STR => {
            let n = take(key, pos, 1)?[0] as usize;
            let s = std::str::from_utf8(take(key, pos, n)?)
                .map_err(|_| PyValueError::new_err("bad UTF-8 in key"))?;
            PyString::new(py, s).into_any()
        }
        T_BYTES => {
            let n = take(key, pos, 1)?[0] as usize;
            PyBytes::new(py, take(key, pos, n)?).into_any()
        }
        T_INT => {
            let n = take(key, pos, 1)?[0] as usize;
            let bytes = take(key, pos, n)?;
            if n == 0 {
                return Err(PyValueError::new_err("empty int in key"));
            }
            if n <= 8 {
                let fill = if bytes[n - 1] & 0x80 != 0 { 0xFF } else { 0 };
                let mut le = [fill; 8];
                le[..n].copy_from_slice(bytes);
                i64::from_le_bytes(le).into_pyobject(py)?.into_any()
            } else {
                let kwargs = pyo3::types::PyDict::new(py);
                kwargs.set_item("signed", true)?;
                py.get_type::<PyInt>().call_method(
                    "from_bytes",
                    (PyBytes::new(py, bytes), "little"),
                    Some(&kwargs),
                )?
            }
        }
        T_FLOAT => {
            let bytes: [u8; 8] = take(key, pos, 8)?.try_into().expect("8 bytes");
            PyFloat::new(py, f64::from_bits(u64::from_le_bytes(bytes))).into_any()
        }
        T_NONE => py.None().into_bound(py),
        T_BOOL => PyBool::new(py, take(key, pos, 1)?[0] != 0)
            .to_owned()
            .into_any(),
        T_TUPLE => {
            let n = take(key, pos, 1)?[0] as usize;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(decode_tagged(py, key, pos)?);
            }
            PyTuple::new(py, items)?.into_any()
        }
        _ => return Err(PyValueError::new_err("unknown key tag")),
    })
}
