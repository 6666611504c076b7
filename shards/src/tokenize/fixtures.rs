//! The pinned real-model tokenizer fixtures the parity tests run on: which families exist
//! (`shards/fixtures/tokenizers.lock`, exactly the list `shards/fixtures/fetch.sh` fetches) and
//! whether an absent one is a failure (`INFERRAIL_REQUIRE_FIXTURES`, which `make test` sets after
//! fetching them) or a skip with a note (a plain `cargo test` without the network).

use std::path::{Path, PathBuf};

/// A fixture that should be there and is not, while `INFERRAIL_REQUIRE_FIXTURES` requires it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "tokenizer fixture for {family} missing at {} (INFERRAIL_REQUIRE_FIXTURES is set; \
     run `make fixtures`, i.e. `bash shards/fixtures/fetch.sh`)",
    dir.display()
)]
pub struct MissingFixture {
    /// The family, as named in the lock file.
    pub family: String,
    /// Where its `tokenizer.json` was looked for.
    pub dir: PathBuf,
}

/// The lock file `fetch.sh` reads.
fn lock_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tokenizers.lock")
}

/// The families of the lock file, in its order: exactly what `fetch.sh` fetches (the first
/// column of every line that is neither blank nor a `#` comment).
pub fn locked_families() -> std::io::Result<Vec<String>> {
    let text = std::fs::read_to_string(lock_path())?;
    Ok(families_of(&text))
}

fn families_of(lock: &str) -> Vec<String> {
    lock.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// True when `INFERRAIL_REQUIRE_FIXTURES` is set to anything but the empty string or `0`.
pub fn fixtures_required() -> bool {
    std::env::var_os("INFERRAIL_REQUIRE_FIXTURES").is_some_and(|v| !v.is_empty() && v != "0")
}

/// The directory of `family`'s fetched tokenizer (under [`super::fixtures_dir`]): `Ok(Some)`
/// when its `tokenizer.json` is there, `Ok(None)` when it is absent and not required (the
/// caller skips, saying so), `Err` when it is absent and required.
pub fn real_fixture(family: &str) -> Result<Option<PathBuf>, MissingFixture> {
    let dir = super::fixtures_dir().join("tokenizers").join(family);
    if dir.join("tokenizer.json").is_file() {
        Ok(Some(dir))
    } else if fixtures_required() {
        Err(MissingFixture {
            family: family.to_owned(),
            dir,
        })
    } else {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_lists_the_three_fetched_families() {
        assert_eq!(
            locked_families().expect("lock file readable"),
            ["qwen3", "llama3_2", "mistral_nemo"]
        );
    }

    #[test]
    fn comments_and_blank_lines_are_not_families() {
        let lock = "# family pkg\n\n  # indented comment\nqwen3 @p 1 a b c\n\t\nllama x y z w v\n";
        assert_eq!(families_of(lock), ["qwen3", "llama"]);
    }
}
