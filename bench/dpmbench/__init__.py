"""dpmbench: what every runner under bench/ shares (Python 3 standard library only).

    proc        run(cmd, timeout, ...) -> Run: one command in its own session,
                a watchdog thread for the timeout, the whole process group
                killed after a failure; note(), is_exe(), nofile_raise()
    alternate   Arm (one launcher's samples or its error) and alternate():
                the untimed check/warm-up run per arm, then rounds in which
                every arm runs once (ABAB, ABBA or rotating order), with a
                time budget that can shrink the rounds
    stats       summary(values) (median, min, max, quartiles, IQR, MAD) and
                ratio(a, b): ratio of medians with a bootstrap 95 % interval
    table       markdown(heads, rows), fmt_num(), spread_text()
    launchers   the launchers under test: dpm (--dpm), the baseline dpm of
                the A/B mode (--dpm-baseline), Hydra (--mpiexec); their
                command lines, copies and availability; add_options()
    provenance  git commit and dirty flag, machine (cores, load, kernel,
                date), binaries (path, mtime, size)
    programs    the benchmark programs' output: lines_check(), SpawnProgram
                and spawn_parse() for spawn_latency / spawn_rate
    paths       ROOT, BENCH, RESULTS (bench/results/), pick()
    output      JSON results under bench/results/ (git-ignored)
    runners     the runners bench/run dispatches to

A runner puts bench/ on sys.path (sys.path.insert(0, <bench>)) and imports
from dpmbench; tests: python3 -m unittest discover -s bench/dpmbench.
"""
