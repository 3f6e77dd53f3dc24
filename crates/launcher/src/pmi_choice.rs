//! `--pmi simple|pmix|auto` (else `DPM_PMI`, else auto): which PMI front end
//! the daemons serve a run's jobs with. One flavour per job, never both:
//! MPICH aborts when `PMI_SIZE` and `PMIX_NAMESPACE` are both set
//! (mpich#7957), and an Open MPI 5 program under PMI-1/2 runs as N unrelated
//! singletons that exit 0. So `auto` picks PMIx for a job that runs Open
//! MPI 5 — its program links `libmpi.so.40`, or a wrapper, script or Python
//! interpreter leads to one that does ([`crate::mpi_probe`]) —, and `simple`
//! refuses such a job with a message saying what to do. What the probe
//! cannot see (a program named by a variable) gets `simple` under `auto`;
//! served PMI-1/2 (under `auto` or `simple`) it is watched
//! (`dpm_daemon::pmix_watch`): an Open MPI rank ends the run, saying to use
//! `--pmi pmix`.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use dpm_kvs::KvsDesign;
use dpm_pmix::library::LibrarySearch;
use dpm_proto::{AppSpec, PmiMode};

use crate::mpi_probe::{self, Mpi};

use crate::error::UsageError;
use crate::plan::PlanError;

/// The `--pmi` setting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PmiFlavour {
    /// PMI-1/PMI-2 (MPICH, Intel MPI, MVAPICH, dpm's libraries).
    Simple,
    /// PMIx (Open MPI 5).
    Pmix,
    /// PMIx when every program links Open MPI 5, else simple.
    #[default]
    Auto,
}

impl FromStr for PmiFlavour {
    type Err = UsageError;
    fn from_str(s: &str) -> Result<Self, UsageError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "simple" | "pmi" | "pmi1" | "pmi2" => Ok(PmiFlavour::Simple),
            "pmix" => Ok(PmiFlavour::Pmix),
            "auto" => Ok(PmiFlavour::Auto),
            other => Err(UsageError(format!("unknown PMI flavour '{other}' (simple, pmix or auto)"))),
        }
    }
}

/// What [`choose`] decided for a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    pub mode: PmiMode,
    pub kvs: KvsDesign,
    /// PMI-1/2 served to a program the probe could not classify (under
    /// `auto` or `simple`): the job needs the PMIx watch (`dpm_daemon::pmix_watch`).
    pub watch: bool,
}

/// How a job of `apps` reaches its PMI server, and its KVS design: PMIx
/// jobs exchange each node's blob at the fence (allgather). Each program
/// is followed through wrappers, scripts and Python ([`mpi_probe`]); an
/// app whose Open MPI was found behind its program gets that Open MPI's
/// PMIx library named (`DPM_PMIX_LIBRARY`, unless it names one) so the
/// node's PMIx server matches its ranks.
pub fn choose(flavour: PmiFlavour, port: bool, kvs: KvsDesign, apps: &mut [AppSpec]) -> Result<Choice, PlanError> {
    let simple = if port { PmiMode::Port } else { PmiMode::Fd };
    let found: Vec<Mpi> = apps.iter().map(mpi_probe::probe).collect();
    let open_mpi = |i: usize| matches!(found[i], Mpi::OpenMpi(_));
    let first = (0..apps.len()).find(|&i| open_mpi(i));
    let pmix = match flavour {
        PmiFlavour::Pmix => true,
        PmiFlavour::Auto => first.is_some(),
        PmiFlavour::Simple => {
            if let Some(i) = first {
                let what = match &found[i] {
                    Mpi::OpenMpi(elf) if elf != Path::new(&apps[i].exe) => format!("runs Open MPI ({} links libmpi.so.40)", elf.display()),
                    _ => "links Open MPI (libmpi.so.40)".to_string(),
                };
                return Err(PlanError::Invalid(format!(
                    "{}: {what}, which needs PMIx; its ranks would each run alone. Use --pmi pmix or --pmi auto (or DPM_PMI=auto)",
                    apps[i].exe
                )));
            }
            false
        }
    };
    if !pmix {
        let unseen = found.contains(&Mpi::Unknown);
        return Ok(Choice { mode: simple, kvs, watch: unseen });
    }
    if port {
        return Err(PlanError::Invalid("--pmi-port serves PMI-1/PMI-2 only; a PMIx job's ranks reach their node's PMIx server".into()));
    }
    if flavour == PmiFlavour::Auto {
        if let Some(i) = (0..apps.len()).find(|&i| !open_mpi(i)) {
            tracing::warn!("{}: does not run Open MPI; served with PMIx as the job's other programs (--pmi simple to refuse)", apps[i].exe);
        }
    }
    for (app, found) in apps.iter_mut().zip(&found) {
        if let Mpi::OpenMpi(elf) = found {
            name_library(app, elf);
        }
    }
    Ok(Choice { mode: PmiMode::Pmix, kvs: KvsDesign::Allgather, watch: false })
}

/// For an app whose Open MPI program is not the app's program (a wrapper,
/// a script, Python's mpi4py): the PMIx library the node daemon would have
/// chosen for that program, as `DPM_PMIX_LIBRARY` in the app's environment
/// (the daemon looks only at the app's program, `$OPAL_PREFIX` and the
/// system). Nothing when the app names a library or the search finds none.
fn name_library(app: &mut AppSpec, elf: &Path) {
    let var = |name: &str| app.env.iter().find(|(k, _)| k == name).map(|(_, v)| PathBuf::from(v));
    if elf == Path::new(&app.exe) || var(LIBRARY_VAR).is_some() {
        return;
    }
    let search = LibrarySearch { explicit: None, program: Some(elf.to_path_buf()), opal_prefix: var("OPAL_PREFIX") };
    let library = search.choose();
    if library.is_file() {
        app.env.push((LIBRARY_VAR.to_string(), library.display().to_string()));
    }
}

/// The daemon's setting for the PMIx library of a job's first program.
const LIBRARY_VAR: &str = "DPM_PMIX_LIBRARY";

/// Why a watched run ended: a node's PMIx watch saw a rank of `exe` (the
/// job's first program as the user wrote it) connect (`ToLauncher::WatchTripped`).
pub fn watch_tripped_message(exe: &str) -> String {
    format!(
        "a rank of '{exe}' runs Open MPI, which needs PMIx: dpm could not tell which MPI the program runs and served PMI-1/2, \
         so it would have run as a singleton. Run it with --pmi pmix (or DPM_PMI=pmix), and for an Open MPI outside the system's \
         libraries say where it is: -genv OPAL_PREFIX <its prefix> (or DPM_PMIX_LIBRARY=<its libpmix.so>)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpi_probe::links_open_mpi;

    fn app(exe: &str) -> AppSpec {
        AppSpec { exe: exe.into(), argv: vec![exe.into()], env: vec![], wdir: "/".into(), node_env: false }
    }

    fn elf_naming(dir: &Path, name: &str, soname: &[u8]) -> String {
        let path = dir.join(name);
        std::fs::write(&path, crate::mpi_probe::elf::tests::image(&[b"libc.so.6", soname])).unwrap();
        path.display().to_string()
    }

    #[test]
    fn flavours_parse_and_unknown_ones_are_refused() {
        assert_eq!("PMIx".parse::<PmiFlavour>().unwrap(), PmiFlavour::Pmix);
        assert_eq!("simple".parse::<PmiFlavour>().unwrap(), PmiFlavour::Simple);
        assert_eq!("auto".parse::<PmiFlavour>().unwrap(), PmiFlavour::Auto);
        assert!("pmi3".parse::<PmiFlavour>().unwrap_err().0.contains("simple, pmix or auto"));
    }

    #[test]
    fn auto_recognises_open_mpi_and_simple_refuses_it() {
        let dir = std::env::temp_dir().join(format!("dpm-pmi-choice-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ompi = elf_naming(&dir, "ompi", b"libmpi.so.40");
        let mpich = elf_naming(&dir, "mpich", b"libmpi.so.12");
        let script = dir.join("script");
        std::fs::write(&script, b"#!/bin/sh\n# libmpi.so.40\0\n").unwrap();
        assert!(links_open_mpi(Path::new(&ompi)));
        assert!(!links_open_mpi(Path::new(&mpich)));
        assert!(!links_open_mpi(&script), "only ELF files are recognised");
        assert!(!links_open_mpi(&dir.join("missing")));

        let auto = |exe: &str| choose(PmiFlavour::Auto, false, KvsDesign::Auto, &mut [app(exe)]).unwrap();
        let plain = |mode, kvs| Choice { mode, kvs, watch: false };
        assert_eq!(auto(&ompi), plain(PmiMode::Pmix, KvsDesign::Allgather));
        assert_eq!(auto(&mpich), plain(PmiMode::Fd, KvsDesign::Auto));
        assert_eq!(choose(PmiFlavour::Auto, true, KvsDesign::Tree, &mut [app(&mpich)]).unwrap(), plain(PmiMode::Port, KvsDesign::Tree));
        assert_eq!(choose(PmiFlavour::Pmix, false, KvsDesign::Auto, &mut [app(&mpich)]).unwrap().mode, PmiMode::Pmix);
        // What the probe cannot classify is watched when served PMI-1/2.
        let unseen = dir.join("unseen");
        std::fs::write(&unseen, b"#!/bin/sh\nexec $PROG\n").unwrap();
        let unseen = unseen.display().to_string();
        assert_eq!(auto(&unseen), Choice { mode: PmiMode::Fd, kvs: KvsDesign::Auto, watch: true });
        assert!(auto(&mpich).mode == PmiMode::Fd && !auto(&mpich).watch, "a program seen to run MPICH is not watched");
        let mixed = choose(PmiFlavour::Auto, false, KvsDesign::Auto, &mut [app(&mpich), app(&unseen)]).unwrap();
        assert!(mixed.watch, "one unseen program is enough");
        assert!(choose(PmiFlavour::Simple, false, KvsDesign::Auto, &mut [app(&unseen)]).unwrap().watch, "--pmi simple refuses an unseen Open MPI too");
        assert!(!choose(PmiFlavour::Pmix, false, KvsDesign::Auto, &mut [app(&unseen)]).unwrap().watch, "a PMIx job needs no watch");
        let refused = choose(PmiFlavour::Simple, false, KvsDesign::Auto, &mut [app(&mpich), app(&ompi)]).unwrap_err();
        assert!(refused.to_string().contains("needs PMIx") && refused.to_string().contains("--pmi pmix"), "{refused}");
        assert!(choose(PmiFlavour::Pmix, true, KvsDesign::Auto, &mut [app(&ompi)]).is_err(), "no PMI port under PMIx");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
