//! A sweep stopped by SIGTERM takes its fleet with it: every simulator and the gateway it
//! started are gone once it has exited (before, they kept running as orphans).
//!
//! Runs the built `inferrail-bench` and the fleet binaries (`cargo build --workspace --bins`;
//! INFERRAIL_BIN_DIR, else target/debug). Linux only: the fleet's processes are found through
//! /proc (their stdout is a log file under the run's work directory).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::fleet::{bin_dir, scratch};

/// Pids of the processes whose stdout is a file under `dir`.
fn processes_logging_under(dir: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if let Ok(target) = std::fs::read_link(entry.path().join("fd/1")) {
            if target.starts_with(dir) {
                pids.push(pid);
            }
        }
    }
    pids
}

/// True while `/proc/PID` exists and is not a zombie.
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

fn send(signal: &str, pid: u32) {
    let _ = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status();
}

#[test]
fn sigterm_stops_the_sweep_and_its_fleet() {
    let bins = bin_dir();
    let dir = scratch("signal", "sweep");
    let spec = dir.join("sweep.toml");
    std::fs::write(
        &spec,
        "policies = [\"round_robin\"]\nreps = 1\n\n[settings]\nduration = \"120s\"\n\
         warmup = \"1s\"\nsim_args = [\"--zero-latency\"]\n\n[[points]]\nworkload = \"w1\"\n\
         rates = [2]\n",
    )
    .unwrap();
    let out = dir.join("runs");
    let mut harness = Command::new(env!("CARGO_BIN_EXE_inferrail-bench"))
        .arg("sweep")
        .arg(&spec)
        .arg("--out")
        .arg(&out)
        .arg("--bin-dir")
        .arg(&bins)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("harness.log")).unwrap())
        .spawn()
        .unwrap();
    // Three simulators and the gateway, all logging under the run's work directory.
    let work: PathBuf = std::path::absolute(out.join(".work")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut fleet = Vec::new();
    while Instant::now() < deadline {
        fleet = processes_logging_under(&work);
        if fleet.len() >= 4 {
            break;
        }
        assert!(
            harness.try_wait().unwrap().is_none(),
            "the sweep exited before its fleet was up; see {}",
            dir.join("harness.log").display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        fleet.len() >= 4,
        "fleet not up within 60 s (found {fleet:?}); see {}",
        dir.join("harness.log").display()
    );

    send("-TERM", harness.id());
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = harness.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let left: Vec<u32> = fleet.iter().copied().filter(|&p| running(p)).collect();
    // Leave nothing behind whatever the verdict.
    for &pid in &left {
        send("-KILL", pid);
    }
    if status.is_none() {
        let _ = harness.kill();
        let _ = harness.wait();
    }
    let status = status.expect("the sweep did not exit within 20 s of SIGTERM");
    assert!(
        left.is_empty(),
        "fleet processes {left:?} outlived the sweep (of {fleet:?})"
    );
    let log = std::fs::read_to_string(dir.join("harness.log")).unwrap();
    // A run failing because the stop killed its simulators must not decide the exit status.
    assert_eq!(
        status.code(),
        Some(128 + 15),
        "exit status {status}; log:\n{log}"
    );
    assert!(log.contains("signal 15: stopped"), "{log}");
    // Nor is that failure reported: the stop is the outcome.
    assert!(!log.contains("inferrail-bench sweep:"), "{log}");
    assert!(
        !out.join("w1-r2-round_robin-rep1.json").exists(),
        "a stopped run leaves no result"
    );
}
