//! Where a model's tokenizer comes from: the builtin simulator tokenizer, a local directory,
//! or a repository already in the local Hugging Face cache. Nothing is ever downloaded.

use std::path::{Path, PathBuf};

use super::error::LoadError;

/// A parsed `tokenizer:` setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenizerSource {
    /// `builtin:sim`, the simulator's tokenizer.
    Builtin,
    /// A local directory holding `tokenizer.json` (and usually `tokenizer_config.json`).
    Dir(PathBuf),
    /// `org/name[@revision]` in the local Hugging Face cache.
    HubCache {
        /// `org/name`.
        repo: String,
        /// A revision (commit or ref name); `refs/main` when `None`.
        revision: Option<String>,
    },
}

impl TokenizerSource {
    /// Parses a setting: `builtin:sim`; a path (one that exists, or starts with `/`, `.` or
    /// `~`; `~/` is the home directory); else `org/name[@rev]`.
    pub fn parse(spec: &str) -> TokenizerSource {
        let spec = spec.trim();
        if spec == crate::builtin::NAME {
            return TokenizerSource::Builtin;
        }
        if let Some(rest) = spec.strip_prefix("~/") {
            if let Some(home) = std::env::var_os("HOME") {
                return TokenizerSource::Dir(PathBuf::from(home).join(rest));
            }
        }
        if spec.starts_with(['/', '.', '~']) || Path::new(spec).exists() {
            return TokenizerSource::Dir(PathBuf::from(spec));
        }
        match spec.split_once('@') {
            Some((repo, rev)) if !rev.is_empty() => TokenizerSource::HubCache {
                repo: repo.to_owned(),
                revision: Some(rev.to_owned()),
            },
            _ => TokenizerSource::HubCache {
                repo: spec.trim_end_matches('@').to_owned(),
                revision: None,
            },
        }
    }
}

/// The Hugging Face hub cache directory: `HF_HUB_CACHE`, else `HF_HOME/hub`, else
/// `~/.cache/huggingface/hub`.
pub fn hub_cache_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("HF_HUB_CACHE") {
        return PathBuf::from(p);
    }
    if let Some(p) = std::env::var_os("HF_HOME") {
        return PathBuf::from(p).join("hub");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    home.join(".cache").join("huggingface").join("hub")
}

/// The snapshot directory of `repo` at `revision` in the cache `cache`: `revision` names a
/// snapshot directly, or a ref file under `refs/` holding the commit (`main` by default).
pub fn resolve_in_cache(
    cache: &Path,
    repo: &str,
    revision: Option<&str>,
) -> Result<PathBuf, LoadError> {
    let not_found = || LoadError::NotInHubCache {
        repo: repo.to_owned(),
        cache: cache.to_owned(),
    };
    let repo_dir = cache.join(format!("models--{}", repo.replace('/', "--")));
    let rev = revision.unwrap_or("main");
    let direct = repo_dir.join("snapshots").join(rev);
    if direct.is_dir() && !rev.contains(['/', '\\']) {
        return Ok(direct);
    }
    let commit =
        std::fs::read_to_string(repo_dir.join("refs").join(rev)).map_err(|_| not_found())?;
    let commit = commit.trim();
    if commit.is_empty() || commit.contains(['/', '\\']) {
        return Err(not_found());
    }
    let snap = repo_dir.join("snapshots").join(commit);
    if snap.is_dir() {
        Ok(snap)
    } else {
        Err(not_found())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        assert_eq!(
            TokenizerSource::parse("builtin:sim"),
            TokenizerSource::Builtin
        );
        assert_eq!(
            TokenizerSource::parse("/models/x"),
            TokenizerSource::Dir("/models/x".into())
        );
        assert_eq!(
            TokenizerSource::parse("./x"),
            TokenizerSource::Dir("./x".into())
        );
        assert_eq!(
            TokenizerSource::parse("Qwen/Qwen3-8B"),
            TokenizerSource::HubCache {
                repo: "Qwen/Qwen3-8B".into(),
                revision: None
            }
        );
        assert_eq!(
            TokenizerSource::parse("Qwen/Qwen3-8B@abc123"),
            TokenizerSource::HubCache {
                repo: "Qwen/Qwen3-8B".into(),
                revision: Some("abc123".into())
            }
        );
    }

    #[test]
    fn resolves_refs_and_direct_revisions() {
        let root = std::env::temp_dir().join(format!("inferrail-hub-{}", std::process::id()));
        let repo = root.join("models--org--name");
        std::fs::create_dir_all(repo.join("snapshots").join("c0ffee")).expect("mkdir");
        std::fs::create_dir_all(repo.join("refs")).expect("mkdir");
        std::fs::write(repo.join("refs").join("main"), "c0ffee\n").expect("write");
        let snap = repo.join("snapshots").join("c0ffee");
        assert_eq!(
            resolve_in_cache(&root, "org/name", None).expect("main"),
            snap
        );
        assert_eq!(
            resolve_in_cache(&root, "org/name", Some("c0ffee")).expect("commit"),
            snap
        );
        assert!(resolve_in_cache(&root, "org/other", None).is_err());
        assert!(resolve_in_cache(&root, "org/name", Some("v2")).is_err());
        let _ = std::fs::remove_dir_all(&root);
    }
}
