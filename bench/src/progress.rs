//! Progress lines for long runs: a bar with elapsed and total time and the run's counters. On a
//! terminal the line redraws in place every second; otherwise (logs, CI) a plain line is
//! printed every ten seconds, so a long run shows it is alive without flooding the log.

use std::io::{IsTerminal, Write};
use std::time::Duration;

/// Where progress goes and how often.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressMode {
    /// Nothing is printed.
    Off,
    /// Redrawn in place on stderr every second (stderr is a terminal).
    Terminal,
    /// A plain line on stderr every ten seconds.
    Lines,
}

impl ProgressMode {
    /// `Terminal` when stderr is a terminal, else `Lines`.
    pub fn detect() -> ProgressMode {
        if std::io::stderr().is_terminal() {
            ProgressMode::Terminal
        } else {
            ProgressMode::Lines
        }
    }

    /// How long between two updates.
    pub fn interval(self) -> Duration {
        match self {
            ProgressMode::Terminal => Duration::from_secs(1),
            ProgressMode::Off | ProgressMode::Lines => Duration::from_secs(10),
        }
    }
}

/// What a run has done so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    /// Requests sent (warmup included).
    pub sent: u64,
    /// Requests that ended, well or not.
    pub ended: u64,
    /// Requests that failed.
    pub failed: u64,
}

/// A bar of `width` cells for `done` out of `total` (clamped to full).
pub fn bar(done: Duration, total: Duration, width: usize) -> String {
    let frac = if total.is_zero() {
        1.0
    } else {
        (done.as_secs_f64() / total.as_secs_f64()).clamp(0.0, 1.0)
    };
    let filled = ((frac * width as f64).round() as usize).min(width);
    let mut s = String::with_capacity(width + 2);
    s.push('[');
    s.extend(std::iter::repeat_n('#', filled));
    s.extend(std::iter::repeat_n('.', width - filled));
    s.push(']');
    s
}

/// The progress line: `[run] [####......] 12/40 s  sent 24  done 20  in flight 4  failed 0`.
pub fn line(label: &str, elapsed: Duration, total: Duration, counts: Counts) -> String {
    format!(
        "[{label}] {} {:.0}/{:.0} s  sent {}  done {}  in flight {}  failed {}",
        bar(elapsed, total, 24),
        elapsed.as_secs_f64().min(total.as_secs_f64()),
        total.as_secs_f64(),
        counts.sent,
        counts.ended,
        counts.sent.saturating_sub(counts.ended),
        counts.failed
    )
}

/// Prints `text` as a progress update in `mode`.
pub fn show(mode: ProgressMode, text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = match mode {
        ProgressMode::Off => Ok(()),
        ProgressMode::Terminal => write!(err, "\r\x1b[2K{text}"),
        ProgressMode::Lines => writeln!(err, "{text}"),
    };
    let _ = err.flush();
}

/// Ends a progress display (a newline after an in-place line).
pub fn finish(mode: ProgressMode) {
    if mode == ProgressMode::Terminal {
        let _ = writeln!(std::io::stderr());
    }
}

/// "about 3 min" style remaining time from the average of the runs done so far.
pub fn eta(elapsed: Duration, done: usize, total: usize) -> Option<String> {
    if done == 0 || done >= total {
        return None;
    }
    let left = elapsed.as_secs_f64() / done as f64 * (total - done) as f64;
    Some(if left < 90.0 {
        format!("about {left:.0} s left")
    } else {
        format!("about {:.0} min left", left / 60.0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bar_fills_with_time_and_stops_full() {
        let s = Duration::from_secs;
        assert_eq!(bar(s(0), s(10), 10), "[..........]");
        assert_eq!(bar(s(5), s(10), 10), "[#####.....]");
        assert_eq!(bar(s(30), s(10), 10), "[##########]");
        assert_eq!(bar(s(1), Duration::ZERO, 4), "[####]");
    }

    #[test]
    fn the_line_counts_in_flight_and_clamps_elapsed() {
        let counts = Counts {
            sent: 24,
            ended: 20,
            failed: 1,
        };
        let l = line(
            "run",
            Duration::from_secs(50),
            Duration::from_secs(40),
            counts,
        );
        assert!(
            l.starts_with("[run] [########################] 40/40 s"),
            "{l}"
        );
        assert!(
            l.ends_with("sent 24  done 20  in flight 4  failed 1"),
            "{l}"
        );
    }

    #[test]
    fn eta_extrapolates_the_average_run() {
        let s = Duration::from_secs;
        assert_eq!(eta(s(60), 0, 10), None);
        assert_eq!(eta(s(60), 10, 10), None);
        assert_eq!(eta(s(30), 3, 6).as_deref(), Some("about 30 s left"));
        assert_eq!(eta(s(600), 10, 30).as_deref(), Some("about 20 min left"));
    }
}
