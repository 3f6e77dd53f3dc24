//! The node's hardware topology as an hwloc XML file, for the ranks'
//! `PMI_hwloc_xmlfile` job attribute, as Hydra's proxy gives it.
//!
//! Without it every MPICH process discovers the topology itself in
//! `MPI_Init` (hwloc reads /proc and /sys, including the I/O devices):
//! measured on the benchmark VM, 18–28 ms of each spawned child's
//! `MPI_Init` under load, most of what made a cold `MPI_Comm_spawn` slower
//! than Hydra's (docs/benchmarks.md, "Where a cold spawn's time goes"). Hydra's
//! proxy exports the topology once and answers the key with the file.
//!
//! dpm does the same once per daemon process, in a background thread started
//! when a rank first asks for the key or the node launches its first spawned
//! job, whichever comes first; the ranks that ask wait for it (the PMI
//! engine's `topology` module), since each would otherwise spend as long
//! discovering the topology as the one export takes. Measured quiet: a
//! rank's discovery costs ~5 ms of CPU, so a 64-rank node would pay ~0.3 s
//! of CPU for what one export gives (docs/benchmarks.md, "Every rank gets
//! the node's topology file").
//! Not at the daemon's start: clients that never ask (raw PMI clients, `true`)
//! would pay its 20–45 ms of CPU just when a run's first ranks start, which
//! measurably skewed their start times on 2 cores (a timing test of waiting
//! gets, `kvs_designs.rs`, saw 220–380 ms for a 300 ms wait instead of
//! 300–303). It uses the system's
//! `libhwloc.so.15` (hwloc 2.x) loaded at run time: dpm does not link hwloc,
//! and without the library the key stays absent. The XML goes into a memfd,
//! named to the ranks as `/proc/<daemon pid>/fd/<fd>`: nothing on disk to
//! clean up, gone with the daemon.

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void, CStr};
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Once, OnceLock};

use tokio::sync::Notify;

/// Why the topology could not be exported (logged at debug level: the ranks
/// then discover it themselves).
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("cannot load {LIBRARY}: {0}")]
    Library(String),
    #[error("{LIBRARY} is hwloc API {0:#x}, not 2.x")]
    Version(c_uint),
    #[error("hwloc: {0} failed")]
    Hwloc(&'static str),
    #[error("cannot write the topology to a memfd: {0}")]
    Memfd(#[from] std::io::Error),
}

const LIBRARY: &str = "libhwloc.so.15";
// hwloc 2.x ABI (stable within libhwloc.so.15): the I/O object types and
// the filter that keeps the important ones, as Hydra's proxy does.
const HWLOC_OBJ_BRIDGE: c_int = 14;
const HWLOC_OBJ_PCI_DEVICE: c_int = 15;
const HWLOC_OBJ_OS_DEVICE: c_int = 16;
const HWLOC_TYPE_FILTER_KEEP_IMPORTANT: c_int = 3;

/// The exported topology: the memfd holding the XML and its path.
#[derive(Debug)]
pub struct Topology {
    _fd: OwnedFd,
    path: String,
}

impl Topology {
    /// What the ranks open: `/proc/<pid>/fd/<fd>`.
    pub fn path(&self) -> &str {
        &self.path
    }
}

/// Where the node reactor gets the topology file from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TopologySource {
    /// Nowhere: `PMI_hwloc_xmlfile` stays absent (tests, in-process clusters).
    #[default]
    Off,
    /// This process's export ([`export`]), by a background thread
    /// ([`TopologySource::start`]).
    Export,
}

static START: Once = Once::new();
/// Set once the export has ended: the file's path, or `None` if it failed.
static ENDED: OnceLock<Option<String>> = OnceLock::new();
/// Wakes [`TopologySource::finished`]'s waiters when it has.
static ENDED_NOTICE: Notify = Notify::const_new();

fn end(path: Option<String>) {
    let _ = ENDED.set(path);
    ENDED_NOTICE.notify_waiters();
}

impl TopologySource {
    /// Start the export (once per process; an `Off` source does nothing).
    pub fn start(self) {
        if self == TopologySource::Off {
            return;
        }
        START.call_once(|| {
            let span = tracing::Span::current();
            let started = std::thread::Builder::new().name("dpm-topology".into()).spawn(move || {
                let _span = span.entered();
                let path = match export() {
                    Ok(topology) => {
                        tracing::debug!(path = topology.path(), "hwloc topology exported");
                        let path = topology.path().to_string();
                        // The memfd lives as long as the process.
                        static KEEP: OnceLock<Topology> = OnceLock::new();
                        let _ = KEEP.set(topology);
                        Some(path)
                    }
                    Err(e) => {
                        tracing::debug!("no hwloc topology for the ranks: {e}");
                        None
                    }
                };
                end(path);
            });
            if let Err(e) = started {
                tracing::debug!("no hwloc topology for the ranks: cannot start its thread: {e}");
                end(None);
            }
        });
    }

    /// Once the export started by [`TopologySource::start`] has ended: the
    /// file's path, or `None` if it failed (at once for `Off`).
    pub async fn finished(self) -> Option<&'static str> {
        if self == TopologySource::Off {
            return None;
        }
        loop {
            let notice = ENDED_NOTICE.notified();
            tokio::pin!(notice);
            // Registered before the check: an end in between still wakes it.
            notice.as_mut().enable();
            if let Some(path) = ENDED.get() {
                return path.as_deref();
            }
            notice.await;
        }
    }
}

type Topo = *mut c_void;

/// The hwloc functions dpm calls, looked up in the loaded library.
struct Hwloc {
    api_version: unsafe extern "C" fn() -> c_uint,
    init: unsafe extern "C" fn(*mut Topo) -> c_int,
    set_type_filter: unsafe extern "C" fn(Topo, c_int, c_int) -> c_int,
    load: unsafe extern "C" fn(Topo) -> c_int,
    export_xmlbuffer: unsafe extern "C" fn(Topo, *mut *mut c_char, *mut c_int, c_ulong) -> c_int,
    free_xmlbuffer: unsafe extern "C" fn(Topo, *mut c_char),
    destroy: unsafe extern "C" fn(Topo),
}

impl Hwloc {
    fn open() -> Result<Hwloc, TopologyError> {
        let library = |e: libloading::Error| TopologyError::Library(e.to_string());
        // SAFETY: loading libhwloc runs its initialisers, which need nothing
        // of us; the library is never unloaded (forgotten below), so the
        // function pointers taken from it stay valid for the process.
        let lib = unsafe { libloading::os::unix::Library::open(Some(LIBRARY), libc::RTLD_NOW | libc::RTLD_LOCAL) }.map_err(library)?;
        let sym = |symbol: &CStr| -> Result<*mut c_void, TopologyError> {
            // SAFETY: the symbol's address, read as a plain pointer; its type
            // is given where it is transmuted below.
            unsafe { lib.get::<*mut c_void>(symbol.to_bytes_with_nul()) }.map(|s| *s).map_err(library)
        };
        // SAFETY: each symbol is the hwloc 2.x function of that name, whose C
        // signature is the one transmuted to (hwloc.h, API 2.x; checked below).
        let hw = unsafe {
            Hwloc {
                api_version: std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> c_uint>(sym(c"hwloc_get_api_version")?),
                init: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut Topo) -> c_int>(sym(c"hwloc_topology_init")?),
                set_type_filter: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(Topo, c_int, c_int) -> c_int>(sym(c"hwloc_topology_set_type_filter")?),
                load: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(Topo) -> c_int>(sym(c"hwloc_topology_load")?),
                export_xmlbuffer: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(Topo, *mut *mut c_char, *mut c_int, c_ulong) -> c_int>(sym(
                    c"hwloc_topology_export_xmlbuffer",
                )?),
                free_xmlbuffer: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(Topo, *mut c_char)>(sym(c"hwloc_free_xmlbuffer")?),
                destroy: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(Topo)>(sym(c"hwloc_topology_destroy")?),
            }
        };
        std::mem::forget(lib);
        // SAFETY: hwloc_get_api_version takes nothing and returns a number.
        let version = unsafe { (hw.api_version)() };
        if version >> 16 != 2 {
            return Err(TopologyError::Version(version));
        }
        Ok(hw)
    }

    /// Discover this machine's topology and export it as XML.
    fn xml(&self) -> Result<Vec<u8>, TopologyError> {
        let mut topo: Topo = std::ptr::null_mut();
        // SAFETY: the hwloc 2.x calls in their documented order; `topo` is
        // destroyed on every path after a successful init, and the buffer is
        // copied before hwloc frees it.
        unsafe {
            if (self.init)(&mut topo) != 0 {
                return Err(TopologyError::Hwloc("hwloc_topology_init"));
            }
            let result = (|| {
                for ty in [HWLOC_OBJ_BRIDGE, HWLOC_OBJ_PCI_DEVICE, HWLOC_OBJ_OS_DEVICE] {
                    if (self.set_type_filter)(topo, ty, HWLOC_TYPE_FILTER_KEEP_IMPORTANT) != 0 {
                        return Err(TopologyError::Hwloc("hwloc_topology_set_type_filter"));
                    }
                }
                if (self.load)(topo) != 0 {
                    return Err(TopologyError::Hwloc("hwloc_topology_load"));
                }
                let mut buf: *mut c_char = std::ptr::null_mut();
                let mut len: c_int = 0;
                if (self.export_xmlbuffer)(topo, &mut buf, &mut len, 0) != 0 || buf.is_null() {
                    return Err(TopologyError::Hwloc("hwloc_topology_export_xmlbuffer"));
                }
                // len counts the terminating NUL.
                let xml = CStr::from_ptr(buf).to_bytes().to_vec();
                (self.free_xmlbuffer)(topo, buf);
                Ok(xml)
            })();
            (self.destroy)(topo);
            result
        }
    }
}

/// This machine's topology as hwloc XML (or the file `HWLOC_XMLFILE` names):
/// hwloc's, or the copy kept from an earlier export on this machine boot
/// ([`crate::topology_cache`]). Also what binding reads (`crate::binding`).
pub fn xml() -> Result<Vec<u8>, TopologyError> {
    let kept = crate::topology_cache::file();
    Ok(match kept.as_deref().and_then(crate::topology_cache::load) {
        Some(xml) => xml,
        None => {
            let xml = Hwloc::open()?.xml()?;
            if let Some(path) = &kept {
                crate::topology_cache::store(path, &xml);
            }
            xml
        }
    })
}

/// Export this machine's topology into a memfd (see the module documentation).
pub fn export() -> Result<Topology, TopologyError> {
    let xml = xml()?;
    let fd = nix::sys::memfd::memfd_create(c"dpm-hwloc-topology", nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC).map_err(std::io::Error::from)?;
    let mut file = std::fs::File::from(fd);
    file.write_all(&xml)?;
    let fd = OwnedFd::from(file);
    let path = format!("/proc/{}/fd/{}", std::process::id(), fd.as_raw_fd());
    Ok(Topology { _fd: fd, path })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_export_is_hwloc_xml_readable_through_its_path() {
        match export() {
            Ok(t) => {
                let xml = std::fs::read_to_string(t.path()).expect("read the topology through /proc");
                assert!(xml.starts_with("<?xml") && xml.contains("<topology") && xml.contains("type=\"PU\""), "{xml}");
            }
            // A machine without hwloc 2: the error names the library.
            Err(TopologyError::Library(e)) => assert!(!e.is_empty()),
            Err(e) => panic!("hwloc is there but the export failed: {e}"),
        }
    }
}
