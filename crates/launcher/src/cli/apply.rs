//! What each option of `dpm run` / `dpm boot` does: [`apply`] takes one
//! option the grammar in `crate::cli` has read (its key, as written, and
//! its values) and sets it in the run's options, the current MPMD segment,
//! or the boot's flags; a bad value is a usage error naming the option.

use super::*;

pub(super) fn apply(key: Key, arg: &str, values: Vec<String>, opts: &mut RunOptions, seg: &mut Segment, boot: &mut BootFlags) -> Result<(), CliError> {
    let usage = |m: String| CliError::Usage(m);
    let mut values = values.into_iter();
    let mut value = || values.next().unwrap_or_default();
    let list = |v: String| v.split(',').filter(|s| !s.is_empty()).map(String::from).collect::<Vec<_>>();
    match key {
        Key::Help => return Err(CliError::Help),
        Key::Version => return Err(CliError::Version),
        Key::Np => {
            let v = value();
            let n: u32 = v.parse().map_err(|_| usage(format!("'{arg} {v}': not a process count")))?;
            if n == 0 {
                return Err(usage(format!("'{arg} {v}': a segment needs at least one process")));
            }
            if let Some(before) = seg.nprocs {
                return Err(usage(format!("'{arg} {v}': this segment's process count is given twice ({before} and {n})")));
            }
            seg.nprocs = Some(n);
        }
        Key::Env => seg.env.push((value(), value())),
        Key::Genv => opts.genv.push((value(), value())),
        Key::EnvList => seg.env_mode = Some(EnvMode::List(list(value()))),
        Key::GenvList => opts.genv_mode = EnvMode::List(list(value())),
        Key::EnvNone => seg.env_mode = Some(EnvMode::None),
        Key::EnvAll => seg.env_mode = Some(EnvMode::All),
        Key::GenvNone => opts.genv_mode = EnvMode::None,
        Key::GenvAll => opts.genv_mode = EnvMode::All,
        Key::Wdir => seg.wdir = Some(value()),
        Key::Label => opts.label = true,
        Key::Timeout => {
            let v = value();
            opts.timeout = Some(parse_secs(&v).ok_or_else(|| usage(format!("'{arg} {v}': not a number of seconds (0 to {MAX_SECS})")))?);
        }
        Key::Usize => {
            let v = value();
            opts.universe_size = Some(match v.to_ascii_uppercase().as_str() {
                "INFINITE" | "UNLIMITED" => -1,
                "SYSTEM" => cpus(),
                _ => v.parse().ok().ok_or_else(|| usage(format!("'{arg} {v}': not a universe size")))?,
            });
        }
        Key::Verbose => opts.verbose = opts.verbose.saturating_add(1),
        Key::VeryVerbose => opts.verbose = opts.verbose.saturating_add(2),
        Key::PmiTrace => opts.pmi_trace = true,
        Key::PmiPort => opts.pmi_port = true,
        Key::Pmi => {
            let v = value();
            opts.pmi = Some(v.parse().map_err(|e: UsageError| usage(format!("'{arg} {v}': {}", e.0)))?);
        }
        Key::NoOversubscribe => opts.no_oversubscribe = true,
        Key::Oversubscribe => opts.no_oversubscribe = false,
        Key::OnSpawnedFailure => {
            let v = value();
            opts.on_spawned_failure = Some(parse_failure_policy(&v).map_err(|e| usage(format!("'{arg} {v}': {e}")))?);
        }
        Key::ReportPlacement => opts.report_placement = true,
        Key::GetStackTraces => opts.stack_traces = true,
        Key::ReportStateOnTimeout => opts.report_state = true,
        Key::WarmSpawn => {
            // Bare: no value (an empty one counts as none).
            let v = value();
            opts.warm_spawn = Some(if v.is_empty() {
                crate::run::DEFAULT_WARM_SPAWN
            } else {
                parse_warm(&v).ok_or_else(|| usage(format!("'{arg}': not a pool size (0 to {})", crate::run::MAX_WARM_SPAWN)))?
            });
        }
        Key::KillGrace => {
            let v = value();
            opts.kill_grace = parse_grace(&v).ok_or_else(|| usage(format!("'{arg} {v}': not a number of seconds (0 to {MAX_SECS})")))?;
        }
        Key::Ppn => {
            let v = value();
            opts.ppn = Some(v.parse().ok().filter(|&n| n > 0).ok_or_else(|| usage(format!("'{arg} {v}': not a count")))?);
        }
        Key::Kvs => {
            let v = value();
            opts.kvs = Some(v.parse().map_err(|e: UnknownDesign| usage(format!("'{arg} {v}': {e}")))?);
        }
        Key::MapBy => {
            let v = value();
            opts.map_by_node = opts.binding.set_map(&v).map_err(|e| usage(format!("'{arg} {v}': {e}")))?;
        }
        Key::BindTo | Key::CpusPerRank | Key::Membind | Key::GpusPerRank => {
            let v = value();
            let b = &mut opts.binding;
            let set = match key {
                Key::BindTo => b.set_bind(&v),
                Key::CpusPerRank => b.set_cpus_per_rank(&v),
                Key::Membind => b.set_membind(&v),
                _ => b.set_gpus_per_rank(&v),
            };
            set.map_err(|e| usage(format!("'{arg} {v}': {e}")))?;
        }
        Key::ReportBindings => opts.binding.report = true,
        Key::Hosts => opts.hosts.extend(list(value())),
        Key::Hostfile => opts.hostfile = Some(value()),
        Key::VirtualNodes => {
            let v = value();
            opts.virtual_nodes = Some(v.parse().ok().filter(|&n| n > 0).ok_or_else(|| usage(format!("'{arg} {v}': not a node count")))?);
        }
        Key::Launcher => {
            let v = value();
            opts.launcher = Some(v.parse().map_err(|_| usage(format!("'{arg} {v}': this dpm starts daemons with {}", crate::nodes::LAUNCHERS)))?);
        }
        Key::Rmk => {
            let v = value();
            opts.rmk = Some(v.parse().map_err(|e: crate::batch::BatchError| usage(format!("'{arg} {v}': {e}")))?);
        }
        Key::Bind => {
            let v = value();
            opts.bind = Some(parse_bind(&v).ok_or_else(|| usage(format!("'{arg} {v}': not an IP address (ADDR or ADDR:PORT)")))?);
        }
        Key::ConnectTimeout => {
            let v = value();
            opts.connect_timeout = Some(parse_secs(&v).ok_or_else(|| usage(format!("'{arg} {v}': not a number of seconds (0 to {MAX_SECS})")))?);
        }
        Key::SshCommand => opts.ssh_command = Some(value()),
        Key::Fanout => {
            let v = value();
            opts.fanout = Some(v.parse().ok().filter(|&n| n > 0).ok_or_else(|| usage(format!("'{arg} {v}': not a fan-out")))?);
        }
        Key::ConfigFile => {}
        Key::OutfilePattern | Key::ErrfilePattern => {
            let v = value();
            crate::outfile::check(&v).map_err(|e| usage(format!("'{arg} {v}': {e}")))?;
            *(if key == Key::OutfilePattern { &mut opts.outfile_pattern } else { &mut opts.errfile_pattern }) = Some(v);
        }
        Key::Localhost => {
            let v = value();
            if v.is_empty() || v.contains(|c: char| c.is_whitespace() || c == ',' || c == '/') {
                return Err(usage(format!("'{arg} {v}': not a host name")));
            }
            opts.localhost = Some(v);
        }
        Key::Topolib => {
            let v = value();
            if !v.eq_ignore_ascii_case("hwloc") {
                return Err(usage(format!("'{arg} {v}': dpm reads the topology with hwloc only")));
            }
        }
        Key::DisableAutoCleanup => opts.disable_auto_cleanup = true,
        Key::PrependPattern => {
            let v = value();
            // Empty is allowed: Hydra then prefixes nothing.
            if !v.is_empty() {
                crate::outfile::check(&v).map_err(|e| usage(format!("'{arg} {v}': {e}")))?;
            }
            opts.prepend_pattern = Some(v);
        }
        Key::PrintAllExitcodes => opts.print_all_exitcodes = true,
        Key::Info => return Err(CliError::Info),
        Key::SkipLaunchNode => opts.skip_launch_node = true,
        Key::OrderNodes => {
            let v = value();
            opts.order_nodes = Some(v.parse().map_err(|()| usage(format!("'{arg} {v}': not a sort order (ASCENDING or DESCENDING)")))?);
        }
        Key::Rankmap => {
            let v = value();
            let map = RankMap::parse(&v).map_err(|e| usage(e.to_string()))?;
            opts.rankmap = Some((v, map));
        }
        Key::Foreground => boot.foreground = true,
        Key::ReadyOnStdout => boot.ready_on_stdout = true,
        Key::BootAdd => boot.add = true,
        Key::BootDrain => {
            let v = value();
            boot.drain.extend(v.split(',').map(str::trim).filter(|h| !h.is_empty()).map(String::from));
        }
        Key::BootForce => boot.force = true,
        Key::Iface => {
            let v = value();
            if v.is_empty() {
                return Err(usage(format!("'{arg}' needs an interface name")));
            }
            opts.iface = Some(v);
        }
        Key::EnableX => opts.x_forwarding = Some(true),
        Key::DisableX => opts.x_forwarding = Some(false),
    }
    Ok(())
}

/// `10.0.0.1`, `10.0.0.1:7000`, `::1` or `[::1]:7000` (port 0: any).
fn parse_bind(text: &str) -> Option<std::net::SocketAddr> {
    text.parse().ok().or_else(|| text.parse::<std::net::IpAddr>().ok().map(|ip| std::net::SocketAddr::new(ip, 0)))
}
