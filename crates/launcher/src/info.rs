//! `-info`: dpm's build details in the layout of Hydra's `-info` (scripts
//! that read its "Launchers available" or "Version" lines find them), and
//! nothing run. The lists come from the options table, so they name what
//! this build takes.

use crate::options::{self, Command};

/// The values an option's shown argument lists (`fork|ssh|...`), blank-separated.
fn choices(name: &str) -> Option<String> {
    let opt = options::lookup(name, Command::Run)?;
    opt.arg.contains('|').then(|| opt.arg.split('|').collect::<Vec<_>>().join(" "))
}

/// What `dpm run -info` prints; `version` is the binary's.
pub fn build_details(version: &str) -> String {
    let rows = [
        ("Version:", version.to_string()),
        ("Process Manager:", "pmi (PMI-1, PMI-2; PMIx for Open MPI)".to_string()),
        ("Launchers available:", choices("launcher").unwrap_or_default()),
        ("Topology libraries available:", "hwloc".to_string()),
        ("Resource management kernels available:", choices("rmk").unwrap_or_else(|| "user slurm".to_string())),
        ("Demux engines available:", "epoll (tokio)".to_string()),
    ];
    let mut out = String::from("dpm build details:\n");
    for (name, value) in rows {
        out.push_str(&format!("    {name:<41}{value}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn hydra_s_rows_with_this_build_s_lists() {
        let text = super::build_details("9.9");
        assert!(text.starts_with("dpm build details:\n    Version:                                 9.9\n"), "{text}");
        let launchers = text.lines().find_map(|l| l.trim().strip_prefix("Launchers available:")).unwrap().trim().to_string();
        for l in launchers.split(' ') {
            assert!(l.parse::<crate::nodes::Launcher>().is_ok(), "{l} is not a launcher dpm takes");
        }
        assert!(launchers.contains("ssh") && text.contains("Resource management kernels available:   "), "{text}");
    }
}
