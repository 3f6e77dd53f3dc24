//! Owned `pmix_info_t` arrays and their Rust counterparts.
//!
//! Owns: [`InfoList`], which builds an info array from plain Rust values and
//! keeps every string and nested array it points to alive as long as the
//! list lives; [`Value`] and [`read_infos`], which copy the library's arrays
//! into owned Rust data (an upcall never keeps a pointer into the library).
use crate::ffi::*;
use std::ffi::{c_char, CStr, CString};

/// A value dpm sends or receives; other PMIx types arrive as `Other(type)`.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Bool(bool),
    String(String),
    /// A string-typed value without a string (a NULL `char *`): PRRTE's
    /// `PMIX_LOCALITY_STRING` for a rank it forks unbound.
    NoString,
    U16(u16),
    U32(u32),
    U64(u64),
    I64(i64),
    Rank(u32),
    Bytes(Vec<u8>),
    Proc(Proc),
    /// A nested array of infos (job/node/proc data arrays).
    Infos(Vec<(String, Value)>),
    /// An array of processes (`PMIX_GROUP_MEMBERSHIP`).
    Procs(Vec<Proc>),
    Other(u16),
}

/// A process: namespace and rank (`PMIX_RANK_WILDCARD` = u32::MAX - 1).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Proc {
    pub nspace: String,
    pub rank: u32,
}

impl Proc {
    pub fn to_c(&self) -> pmix_proc_t {
        let mut out = pmix_proc_t { nspace: [0; NSPACE_LEN], rank: self.rank };
        copy_str(&mut out.nspace, &self.nspace);
        out
    }

    /// # Safety
    /// `raw` points at a valid `pmix_proc_t`.
    pub unsafe fn from_c(raw: *const pmix_proc_t) -> Proc {
        // SAFETY: caller's guarantee; nspace is NUL-padded within 256 bytes.
        let raw = unsafe { &*raw };
        Proc { nspace: fixed_str(&raw.nspace), rank: raw.rank }
    }
}

/// Copies `src` into a fixed C char array, truncated to leave a NUL.
pub fn copy_str(dst: &mut [c_char], src: &str) {
    dst.fill(0);
    let room = dst.len().saturating_sub(1);
    for (d, s) in dst.iter_mut().zip(src.bytes().take(room)) {
        *d = s as c_char;
    }
}

/// The string in a NUL-padded fixed array (lossy UTF-8).
pub fn fixed_str(src: &[c_char]) -> String {
    let bytes: Vec<u8> = src.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// An info array owned by Rust. The `pmix_info_t`s point into `strings`,
/// `procs` and `nested`, all heap-allocated and never moved while the list
/// lives, so the pointers stay valid until it is dropped.
#[derive(Default)]
pub struct InfoList {
    infos: Vec<pmix_info_t>,
    strings: Vec<CString>,
    // Boxed: infos point at them, and the Vec may reallocate as it grows.
    #[allow(clippy::vec_box)]
    procs: Vec<Box<pmix_proc_t>>,
    nested: Vec<(InfoList, Box<pmix_data_array_t>)>,
    /// Arrays of processes and the data arrays pointing at them.
    proc_arrays: Vec<(Box<[pmix_proc_t]>, Box<pmix_data_array_t>)>,
    /// Byte objects' contents (a lookup's answer: Open MPI publishes some).
    bytes: Vec<Vec<u8>>,
}

// SAFETY: the raw pointers only point into the list's own heap data.
unsafe impl Send for InfoList {}

impl InfoList {
    pub fn new() -> InfoList {
        InfoList::default()
    }

    pub fn len(&self) -> usize {
        self.infos.len()
    }

    pub fn is_empty(&self) -> bool {
        self.infos.is_empty()
    }

    /// The infos themselves (for a caller that adjusts what they point to).
    pub(crate) fn infos_mut(&mut self) -> &mut [pmix_info_t] {
        &mut self.infos
    }

    /// Pointer for the C call; null when empty. Valid while `self` lives.
    pub fn as_mut_ptr(&mut self) -> *mut pmix_info_t {
        if self.infos.is_empty() {
            std::ptr::null_mut()
        } else {
            self.infos.as_mut_ptr()
        }
    }

    /// Appends `key = value`; a string with a NUL byte is rejected.
    pub fn push(&mut self, key: &str, value: Value) -> Result<&mut Self, crate::PmixError> {
        let invalid = |detail: String| crate::PmixError::Invalid { what: "info value", detail };
        if key.len() >= KEY_LEN {
            return Err(invalid(format!("key {key:?} longer than {} bytes", KEY_LEN - 1)));
        }
        let (type_, data) = match value {
            Value::Bool(b) => (PMIX_BOOL, pmix_value_data { flag: b }),
            Value::U16(v) => (PMIX_UINT16, pmix_value_data { uint16: v }),
            Value::U32(v) => (PMIX_UINT32, pmix_value_data { uint32: v }),
            Value::U64(v) => (PMIX_UINT64, pmix_value_data { uint64: v }),
            Value::I64(v) => (PMIX_INT64, pmix_value_data { int64: v }),
            Value::Rank(v) => (PMIX_PROC_RANK, pmix_value_data { rank: v }),
            Value::String(s) => {
                let c = CString::new(s).map_err(|e| invalid(format!("{key}: {e}")))?;
                let ptr = c.as_ptr() as *mut c_char;
                self.strings.push(c);
                (PMIX_STRING, pmix_value_data { string: ptr })
            }
            Value::NoString => (PMIX_STRING, pmix_value_data { string: std::ptr::null_mut() }),
            Value::Proc(p) => {
                let mut boxed = Box::new(p.to_c());
                let ptr: *mut pmix_proc_t = &mut *boxed;
                self.procs.push(boxed);
                (PMIX_PROC, pmix_value_data { proc_: ptr })
            }
            Value::Infos(items) => {
                let mut inner = InfoList::new();
                for (k, v) in items {
                    inner.push(&k, v)?;
                }
                let mut array = Box::new(pmix_data_array_t { type_: PMIX_INFO, size: inner.len(), array: inner.as_mut_ptr().cast() });
                let ptr: *mut pmix_data_array_t = &mut *array;
                self.nested.push((inner, array));
                (PMIX_DATA_ARRAY, pmix_value_data { darray: ptr })
            }
            Value::Procs(procs) => {
                let mut members: Box<[pmix_proc_t]> = procs.iter().map(Proc::to_c).collect();
                let ptr = if members.is_empty() { std::ptr::null_mut() } else { members.as_mut_ptr().cast() };
                let mut array = Box::new(pmix_data_array_t { type_: PMIX_PROC, size: members.len(), array: ptr });
                let darray: *mut pmix_data_array_t = &mut *array;
                self.proc_arrays.push((members, array));
                (PMIX_DATA_ARRAY, pmix_value_data { darray })
            }
            Value::Bytes(b) => {
                // The Vec's heap buffer does not move when `bytes` grows.
                let (ptr, size) = (b.as_ptr() as *mut c_char, b.len());
                self.bytes.push(b);
                let ptr = if size == 0 { std::ptr::null_mut() } else { ptr };
                (PMIX_BYTE_OBJECT, pmix_value_data { bo: pmix_byte_object_t { bytes: ptr, size } })
            }
            Value::Other(_) => return Err(invalid(format!("{key}: type not sent by dpm"))),
        };
        let mut info = pmix_info_t { key: [0; KEY_LEN], flags: 0, value: pmix_value_t { type_, data: pmix_value_data { _envar: [0; 3] } } };
        // Set the member after zeroing the whole union (no stray bytes).
        info.value.data = data;
        copy_str(&mut info.key, key);
        self.infos.push(info);
        Ok(self)
    }
}

/// Copies `n` infos at `ptr` into owned pairs.
///
/// # Safety
/// `ptr` is null or points at `n` valid `pmix_info_t`s.
pub unsafe fn read_infos(ptr: *const pmix_info_t, n: usize) -> Vec<(String, Value)> {
    if ptr.is_null() || n == 0 {
        return Vec::new();
    }
    // SAFETY: caller's guarantee.
    let infos = unsafe { std::slice::from_raw_parts(ptr, n) };
    infos
        .iter()
        // SAFETY: each value is a valid pmix_value_t from the library.
        .map(|i| (fixed_str(&i.key), unsafe { read_value(&i.value) }))
        .collect()
}

/// # Safety
/// `v` is a valid `pmix_value_t` whose union member matches its type.
pub unsafe fn read_value(v: &pmix_value_t) -> Value {
    // SAFETY: the union member read is the one `type_` names.
    unsafe {
        match v.type_ {
            PMIX_BOOL => Value::Bool(v.data.flag),
            PMIX_STRING if v.data.string.is_null() => Value::String(String::new()),
            PMIX_STRING => Value::String(CStr::from_ptr(v.data.string).to_string_lossy().into_owned()),
            PMIX_UINT16 => Value::U16(v.data.uint16),
            PMIX_UINT32 | PMIX_UINT => Value::U32(v.data.uint32),
            PMIX_UINT64 | PMIX_SIZE => Value::U64(v.data.uint64),
            PMIX_INT64 => Value::I64(v.data.int64),
            PMIX_INT | PMIX_INT32 | PMIX_STATUS => Value::I64(i64::from(v.data.int32)),
            PMIX_PROC_RANK => Value::Rank(v.data.rank),
            PMIX_PROC if !v.data.proc_.is_null() => Value::Proc(Proc::from_c(v.data.proc_)),
            PMIX_BYTE_OBJECT => Value::Bytes(bytes(v.data.bo.bytes, v.data.bo.size)),
            PMIX_DATA_ARRAY if !v.data.darray.is_null() && (*v.data.darray).type_ == PMIX_INFO => {
                let a = &*v.data.darray;
                Value::Infos(read_infos(a.array.cast(), a.size))
            }
            PMIX_DATA_ARRAY if !v.data.darray.is_null() && (*v.data.darray).type_ == PMIX_PROC => {
                let a = &*v.data.darray;
                let members: *const pmix_proc_t = a.array.cast();
                Value::Procs(if members.is_null() { Vec::new() } else { (0..a.size).map(|i| Proc::from_c(members.add(i))).collect() })
            }
            other => Value::Other(other),
        }
    }
}

/// Copies `n` bytes at `ptr` (null or zero: empty).
///
/// # Safety
/// `ptr` is null or valid for `n` bytes.
pub unsafe fn bytes(ptr: *const c_char, n: usize) -> Vec<u8> {
    if ptr.is_null() || n == 0 {
        return Vec::new();
    }
    // SAFETY: caller's guarantee.
    unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), n) }.to_vec()
}

/// Copies a NULL-terminated `char **` array of strings.
///
/// # Safety
/// `argv` is null or a NULL-terminated array of valid C strings.
pub unsafe fn read_argv(argv: *const *mut c_char) -> Vec<String> {
    let mut out = Vec::new();
    if argv.is_null() {
        return out;
    }
    let mut i = 0;
    // SAFETY: caller's guarantee: walk until the NULL terminator.
    unsafe {
        while !(*argv.add(i)).is_null() {
            out.push(CStr::from_ptr(*argv.add(i)).to_string_lossy().into_owned());
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_infos_read_back_equal() {
        let items = vec![
            ("pmix.job.size".to_string(), Value::U32(4)),
            ("pmix.lpeers".to_string(), Value::String("0,1,2,3".into())),
            ("pmix.spawned".to_string(), Value::Bool(true)),
            ("pmix.parent".to_string(), Value::Proc(Proc { nspace: "dpm.7".into(), rank: 2 })),
            ("pmix.pdata".to_string(), Value::Infos(vec![("pmix.rank".into(), Value::Rank(3))])),
            ("cid".to_string(), Value::Bytes(vec![2, 8, 0])),
            ("empty".to_string(), Value::Bytes(vec![])),
            ("pmix.grp.mbrs".to_string(), Value::Procs(vec![Proc { nspace: "a".into(), rank: 0 }, Proc { nspace: "b".into(), rank: 7 }])),
            ("none".to_string(), Value::Procs(vec![])),
        ];
        let mut list = InfoList::new();
        for (k, v) in items.clone() {
            list.push(&k, v).unwrap();
        }
        // SAFETY: the list owns len() valid infos.
        let back = unsafe { read_infos(list.as_mut_ptr(), list.len()) };
        assert_eq!(back, items);
    }

    #[test]
    fn bad_strings_and_keys_are_rejected() {
        let mut list = InfoList::new();
        assert!(list.push("k", Value::String("a\0b".into())).is_err());
        assert!(list.push(&"k".repeat(600), Value::Bool(true)).is_err());
        assert!(list.is_empty());
    }

    #[test]
    fn long_nspace_is_truncated_with_nul() {
        let p = Proc { nspace: "n".repeat(400), rank: 1 }.to_c();
        assert_eq!(p.nspace[NSPACE_LEN - 1], 0);
        // SAFETY: p is a valid pmix_proc_t.
        assert_eq!(unsafe { Proc::from_c(&p) }.nspace.len(), NSPACE_LEN - 1);
    }
}
