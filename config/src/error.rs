//! The errors `parse_str` and `load_file` return: an I/O failure, or every problem found at once.

use std::fmt;

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The path as given.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The text was read but is not a valid configuration; every problem is listed.
    #[error("{0}")]
    Invalid(Problems),
}

impl ConfigError {
    /// The problems, when the configuration was invalid (not when it could not be read).
    pub fn problems(&self) -> Option<&Problems> {
        match self {
            ConfigError::Invalid(problems) => Some(problems),
            ConfigError::Io { .. } => None,
        }
    }
}

/// One thing wrong with a configuration, and where.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// Where: `server.listen`, `replicas[2].url`, `routing.split.p2c`; empty for the whole
    /// document (a YAML syntax error, whose message carries the line and column instead).
    pub path: String,
    /// What is wrong, in words a user can act on.
    pub message: String,
}

impl Problem {
    /// A problem at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Problem {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Every problem found in one configuration, in the order they were found.
#[derive(Debug, Clone, PartialEq)]
pub struct Problems(pub Vec<Problem>);

impl Problems {
    /// The problem at exactly `path`, if any (the first one).
    pub fn at(&self, path: &str) -> Option<&Problem> {
        self.0.iter().find(|p| p.path == path)
    }
}

impl fmt::Display for Problems {
    /// One problem per line, `path: message`, without a trailing newline.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, problem) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}
