//! `dpm model`: its JSON answers the contract `bench/model` relies on, the
//! same question gets the same numbers, a given calibration file is used,
//! and bad input is a usage error.

mod common;

use common::{repo_root, Dpm, TempFile};

fn json(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["model"];
    all.extend_from_slice(args);
    let out = Dpm::raw(all).output();
    out.assert_success();
    serde_json::from_str(&out.stdout_str()).unwrap_or_else(|e| panic!("{e}\n{}", out.describe()))
}

#[test]
fn the_json_answer_has_its_breakdown_and_best_and_is_stable() {
    let args = ["--nodes", "8", "--ppn", "4", "--bootstrap", "fork", "--json"];
    let a = json(&args);
    assert_eq!(a, json(&args), "a rerun gives identical numbers");
    let startup = a["startup_s"].as_f64().unwrap();
    let phases = a["breakdown"].as_object().unwrap();
    let keys: Vec<&str> = phases.keys().map(String::as_str).collect();
    assert_eq!(keys, ["bootstrap", "exit", "launch", "library", "pmi"]);
    let sum: f64 = phases.values().map(|v| v.as_f64().unwrap()).sum();
    assert!(startup > 0.0 && (sum - startup).abs() < 1e-9, "{a}");
    assert_eq!((a["kvs"].as_str(), a["fanout"].as_u64(), a["method"].as_str()), (Some("auto"), Some(32), Some("simulated")));
    let candidates = a["candidates"].as_array().unwrap();
    let fastest = candidates.iter().map(|c| c["startup_s"].as_f64().unwrap()).fold(f64::INFINITY, f64::min);
    assert_eq!(a["best"]["startup_s"].as_f64(), Some(fastest));
    // Clear only when nothing else is within the model's error (10 %).
    let within = candidates.iter().filter(|c| c["startup_s"].as_f64().unwrap() <= fastest * 1.1).count();
    assert_eq!(a["best"]["clear"].as_bool(), Some(within == 1), "{}", a["best"]);
    assert_eq!(a["best"]["tied"].as_array().map(Vec::len), Some(within - 1));
    // Booted skips the bootstrap; ssh comes up slower than fork.
    let booted = json(&["--nodes", "8", "--ppn", "4", "--bootstrap", "fork", "--booted", "--kvs", "auto", "--tree-fanout", "32", "--json"]);
    assert!(booted["startup_s"].as_f64().unwrap() < startup);
    let ssh = json(&["--nodes", "8", "--ppn", "4", "--kvs", "auto", "--tree-fanout", "32", "--json"]);
    assert!(ssh["breakdown"]["bootstrap"].as_f64() > a["breakdown"]["bootstrap"].as_f64());
}

#[test]
fn a_calibration_file_is_used_and_a_bad_one_refused() {
    let sample = std::fs::read_to_string(repo_root().join("crates/cluster/calibration/sample.json")).unwrap();
    let mut cal: serde_json::Value = serde_json::from_str(&sample).unwrap();
    cal["machine"]["host"] = "test-host".into();
    let file = TempFile::new("dpm-model-cal", cal.to_string().as_bytes(), 0o600);
    let path = file.path.to_str().unwrap();
    let a = json(&["--nodes", "2", "--ppn", "2", "--calibration", path, "--kvs", "tree", "--tree-fanout", "2", "--json"]);
    assert_eq!(a["calibration"]["host"], "test-host");
    assert_eq!(a["candidates"].as_array().unwrap().len(), 1);

    cal["costs"].as_object_mut().unwrap().remove("link_hop");
    let bad = TempFile::new("dpm-model-bad", cal.to_string().as_bytes(), 0o600);
    let out = Dpm::raw(["model", "--nodes", "2", "--ppn", "2", "--calibration", bad.path.to_str().unwrap()]).output();
    out.assert_code(2);
    out.assert_stderr_contains("link_hop");
}

#[test]
fn bad_questions_are_usage_errors() {
    for (args, says) in [
        (&["--nodes", "0", "--ppn", "2"][..], "at least 1"),
        (&["--nodes", "2", "--ppn", "2", "--kvs", "bogus"], "bogus"),
        (&["--nodes", "2", "--ppn", "2", "--tree-fanout", "0"], "--tree-fanout"),
        (&["--nodes", "2", "--ppn", "2", "--bootstrap", "rsh"], "rsh"),
        (&["--nodes", "2", "--ppn", "2", "--workload", "ring"], "ring"),
        (&["--nodes", "2", "--ppn", "2", "--calibration", "/nonexistent/cal.json"], "/nonexistent/cal.json"),
    ] {
        let mut all = vec!["model"];
        all.extend_from_slice(args);
        let out = Dpm::raw(all).output();
        out.assert_code(2);
        out.assert_stderr_contains(says);
    }
}

#[test]
fn the_text_answer_names_the_method_and_the_best() {
    let out = Dpm::raw(["model", "--nodes", "4", "--ppn", "2", "--bootstrap", "fork"]).output();
    out.assert_success();
    out.assert_stdout_contains("predicted startup with --kvs auto --tree-fanout 32");
    out.assert_stdout_contains("(simulated)");
    // 4 nodes of 2 ranks: the candidates are within the model's error of each other.
    out.assert_stdout_contains("no clear best: the fastest, --kvs ");
    assert!(!out.stdout_str().contains("\nbest:"), "{}", out.stdout_str());
    // Over ssh the fan-out matters (serial ssh starts): one wins beyond the error.
    let out = Dpm::raw(["model", "--nodes", "64", "--ppn", "16", "--bootstrap", "ssh", "--kvs", "allgather"]).output();
    out.assert_success();
    out.assert_stdout_contains("best: --kvs allgather --tree-fanout 4 (");
    out.assert_stdout_contains("every other is slower by more than the model's ±10 %");
    let one = Dpm::raw(["model", "--nodes", "64", "--ppn", "16", "--kvs", "auto", "--tree-fanout", "32"]).output();
    one.assert_success();
    one.assert_stdout_contains("best: --kvs auto --tree-fanout 32 (");
    one.assert_stdout_contains("; the only candidate asked)");
}

/// `dpm run` without a fan-out, under `--kvs auto` (the default), asks the
/// model and says why under `-v`; what the user gave is not questioned.
#[test]
fn a_run_without_a_fanout_takes_the_models_and_says_why_under_v() {
    let lines =
        |out: &common::Output, what: &str| -> Vec<String> { out.err_lines().into_iter().filter(|l| l.contains(what) && !l.contains("kvs stats")).collect() };
    let out = Dpm::run(["-v", "--virtual-nodes", "4", "-ppn", "1", "-n", "4", "true"]).output();
    out.assert_success();
    let why = lines(&out, "tree fan-out");
    assert_eq!(why.len(), 1, "{}", out.describe());
    // Four virtual nodes of this host: the fan-outs tie, the default stays.
    // (Which of the two reasons depends on the calibration: the fan-outs'
    // predictions within the error, or the daemons' start too small a part.)
    let tie = why[0].contains("within its ±") || why[0].contains("no fan-out can be faster beyond its ±");
    assert!(why[0].contains("tree fan-out 32 (the default): ") && why[0].contains("4 nodes x 1 ranks, fork") && tie, "{why:?}");
    // So do the designs: auto keeps its per-key rule, and says so.
    let kvs = lines(&out, "kvs auto (auto's per-key rule");
    assert_eq!(kvs.len(), 1, "{}", out.describe());
    assert!(kvs[0].contains("within its ±10 % of the fastest") || kvs[0].contains("no design can be faster beyond its ±10 %"), "{kvs:?}");
    let given = Dpm::run(["-v", "--virtual-nodes", "4", "--tree-fanout", "2", "-ppn", "1", "-n", "4", "true"]).output();
    given.assert_success();
    assert!(!given.stderr_str().contains("tree fan-out"), "{}", given.describe());
    assert_eq!(lines(&given, "kvs auto (").len(), 1, "auto is still the model's to choose: {}", given.describe());
    let both = Dpm::run(["-v", "--virtual-nodes", "4", "--tree-fanout", "2", "--kvs", "dkvs", "-ppn", "1", "-n", "4", "true"]).output();
    both.assert_success();
    assert!(lines(&both, "the model").is_empty(), "{}", both.describe());
    let off = Dpm::run(["-v", "--virtual-nodes", "4", "-ppn", "1", "-n", "4", "true"]).env("DPM_ADVICE", "off").output();
    off.assert_success();
    assert!(lines(&off, "the model").is_empty(), "DPM_ADVICE=off: {}", off.describe());
    // One node has no tree: nothing to ask.
    let one = Dpm::run(["-v", "-n", "2", "true"]).output();
    one.assert_success();
    assert!(!one.stderr_str().contains("tree fan-out"), "{}", one.describe());
}

/// Under a calibration where moving every card to every node is dear
/// (`link_byte` 300,000 times this machine's), auto's rule (allgather for
/// MPICH's unhinted keys) loses beyond the model's error: `dpm run` takes the
/// model's design, says why, and its daemons run it. An unreadable
/// calibration is a usage error.
#[test]
fn kvs_auto_follows_the_model_of_dpm_calibration() {
    let text = std::fs::read_to_string(repo_root().join("crates/cluster/calibration/polyglot.json")).unwrap();
    let mut cal: serde_json::Value = serde_json::from_str(&text).unwrap();
    for field in ["median_us", "p10_us", "p90_us"] {
        let v = &mut cal["costs"]["link_byte"][field];
        *v = (v.as_f64().unwrap() * 3e5).into();
    }
    let file = TempFile::new("dear-bytes.json", cal.to_string().as_bytes(), 0o600);
    let out = Dpm::run(["-v", "--virtual-nodes", "4", "-ppn", "1", "-n", "4", "true"]).env("DPM_CALIBRATION", &file.path_str()).output();
    out.assert_success();
    let chosen: Vec<String> = out.err_lines().into_iter().filter(|l| l.contains("chosen by the model")).collect();
    assert_eq!(chosen.len(), 1, "{}", out.describe());
    let design =
        ["tree", "dkvs", "direct"].into_iter().find(|d| chosen[0].contains(&format!("kvs {d} chosen by the model: "))).unwrap_or_else(|| panic!("{chosen:?}"));
    assert!(chosen[0].contains("under auto's per-key rule (beyond its ±10 %)"), "{chosen:?}");
    // Every daemon's KVS ran the chosen design.
    let stats: Vec<String> = out.err_lines().into_iter().filter(|l| l.contains("node{node=") && l.contains("kvs stats")).collect();
    assert_eq!(stats.len(), 4, "{}", out.describe());
    assert!(stats.iter().all(|l| l.contains(&format!("design={design} "))), "{stats:?}");
    let bad = Dpm::run(["--virtual-nodes", "4", "-ppn", "1", "-n", "4", "true"]).env("DPM_CALIBRATION", "/nonexistent/cal.json").output();
    assert_eq!(bad.code(), 2, "{}", bad.describe());
    assert!(bad.stderr_str().contains("dpm: error: DPM_CALIBRATION: ") && bad.stderr_str().contains("/nonexistent/cal.json"), "{}", bad.describe());
}
