//! The config in effect and how it changes while the router runs: re-reading the file (on a timer
//! or SIGHUP) and PATCHes from the admin API.
//!
//! [`ConfigStore`] keeps the config in effect as a JSON document (what the admin API shows and
//! PATCHes), its parsed [`Config`] and a generation that counts applied changes. A candidate
//! (the file's new contents, or the document with a merge patch applied) is validated in full
//! and compared with the config the process started with: if it is invalid, or changes a setting
//! that needs a restart (see `inferrail_config`'s live module for the three classes), it is
//! refused whole and nothing changes. An applied change says which models each changed routing
//! setting reaches, and warns when it reaches none because every model keeps its own. [`FilePoller`] decides when the file is due
//! for a re-read and [`sighup_flag`] records SIGHUPs for the control thread to pick up.
//!
//! The file and PATCHes are two writers of one document: a PATCH lasts until the file's contents
//! change, and then the file's document replaces the running one whole (the PATCH is gone).

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use inferrail_config::{
    document_of_yaml, merge_patch, parse_document, Config, ConfigError, Problems, RoutingReach,
};
use serde_json::Value;

/// The config in effect: its document, the parsed config, the generation and the file it came
/// from. Every change goes through [`ConfigStore::reload_file`] or [`ConfigStore::patch`], which
/// apply a candidate whole or not at all.
#[derive(Debug)]
pub struct ConfigStore {
    /// The config file, when the router was started with one.
    path: Option<PathBuf>,
    /// The document in effect.
    document: Value,
    /// `document`, parsed.
    config: Config,
    /// The config the process started with: restart-only settings are checked against it (a
    /// model's tokenizer is the one loaded at start, whatever was applied since).
    started: Config,
    /// 1 at start, plus one per applied change.
    generation: u64,
    /// The file's text at the last read; `None` before the first re-read.
    file_text: Option<String>,
    /// The file's document as last applied (the start-up document until a re-read applies).
    file_document: Value,
}

/// A change that was applied: the new generation, the config now in effect and how its routing
/// changes reach the models.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    /// The generation now in effect.
    pub generation: u64,
    /// The config now in effect.
    pub config: Config,
    /// Each changed routing setting with the models it reaches (empty when none changed).
    pub routing: Vec<RoutingReach>,
}

impl Applied {
    /// One line per routing change that reaches no model (every model keeps its own setting).
    pub fn warnings(&self) -> Vec<String> {
        self.routing
            .iter()
            .filter_map(RoutingReach::warning)
            .collect()
    }
}

impl fmt::Display for Applied {
    /// `generation N applied`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "generation {} applied", self.generation)
    }
}

/// Why a candidate config was refused. The running config and its generation are unchanged.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refusal {
    /// The candidate is not a valid configuration; every problem, with its path.
    #[error("configuration refused, nothing applied; fix these problems:\n{0}")]
    Invalid(Problems),
    /// The candidate changes settings that only take effect after a restart (their paths).
    #[error("configuration refused, nothing applied: {} {} a restart to change", .0.join(", "), if .0.len() == 1 { "needs" } else { "need" })]
    RestartRequired(Vec<String>),
    /// The config file could not be read (the message names it).
    #[error("configuration not reloaded: {0}")]
    Io(String),
    /// There is no config file to re-read: the router was started without one.
    #[error("configuration not reloaded: the router was started without a config file")]
    NoFile,
}

impl From<ConfigError> for Refusal {
    fn from(err: ConfigError) -> Self {
        match err {
            ConfigError::Invalid(problems) => Refusal::Invalid(problems),
            io @ ConfigError::Io { .. } => Refusal::Io(io.to_string()),
        }
    }
}

impl ConfigStore {
    /// The store for a config that is already in effect, at generation 1. `doc` must be the
    /// document `config` was parsed from (from [`document_of_yaml`] for a file); `path` is the
    /// file [`ConfigStore::reload_file`] re-reads.
    pub fn new(path: Option<PathBuf>, doc: Value, config: Config) -> Self {
        ConfigStore {
            path,
            file_document: doc.clone(),
            document: doc,
            started: config.clone(),
            config,
            generation: 1,
            file_text: None,
        }
    }

    /// The generation in effect: 1 at start, plus one per applied change.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The config in effect.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The document in effect (what the admin API shows and PATCHes).
    pub fn document(&self) -> &Value {
        &self.document
    }

    /// The config file, if the router was started with one.
    pub fn path(&self) -> Option<&PathBuf> {
        self.path.as_ref()
    }

    /// Re-reads the file and applies it. `Ok(None)` when its contents did not change since the
    /// last read (or changed only in comments and layout: its document is the one last
    /// applied), so a refused file is reported once, not at every poll. A changed file replaces
    /// the document in effect whole, PATCHes included.
    pub fn reload_file(&mut self) -> Result<Option<Applied>, Refusal> {
        self.reload_file_checked(|_| Ok(()))
    }

    /// [`ConfigStore::reload_file`] with an extra check the candidate must pass before it is
    /// applied (the control plane resolves its replicas and builds its policies there).
    pub fn reload_file_checked(
        &mut self,
        check: impl FnOnce(&Config) -> Result<(), Refusal>,
    ) -> Result<Option<Applied>, Refusal> {
        let Some(path) = &self.path else {
            return Err(Refusal::NoFile);
        };
        let text = std::fs::read_to_string(path)
            .map_err(|err| Refusal::Io(format!("cannot read {}: {err}", path.display())))?;
        if self.file_text.as_deref() == Some(text.as_str()) {
            return Ok(None);
        }
        let doc = document_of_yaml(&text);
        self.file_text = Some(text);
        let doc = doc?;
        if doc == self.file_document {
            return Ok(None);
        }
        let applied = self.apply(doc.clone(), check)?;
        self.file_document = doc;
        Ok(Some(applied))
    }

    /// Applies an RFC 7396 merge patch to the document in effect (`null` deletes a setting,
    /// which then takes its default). A patch that changes nothing is applied without a new
    /// generation.
    pub fn patch(&mut self, patch: &Value) -> Result<Applied, Refusal> {
        self.patch_checked(patch, |_| Ok(()))
    }

    /// [`ConfigStore::patch`] with an extra check the candidate must pass before it is applied.
    pub fn patch_checked(
        &mut self,
        patch: &Value,
        check: impl FnOnce(&Config) -> Result<(), Refusal>,
    ) -> Result<Applied, Refusal> {
        let mut doc = self.document.clone();
        merge_patch(&mut doc, patch);
        self.apply(doc, check)
    }

    /// Validates `doc` and makes it the document in effect, or refuses it whole.
    fn apply(
        &mut self,
        doc: Value,
        check: impl FnOnce(&Config) -> Result<(), Refusal>,
    ) -> Result<Applied, Refusal> {
        let config = parse_document(&doc)?;
        let restart = self.started.restart_required(&config);
        if !restart.is_empty() {
            return Err(Refusal::RestartRequired(restart));
        }
        check(&config)?;
        let mut routing = Vec::new();
        if doc != self.document {
            routing = self.config.routing_reach(&config);
            self.document = doc;
            self.config = config;
            self.generation += 1;
        }
        Ok(Applied {
            generation: self.generation,
            config: self.config.clone(),
            routing,
        })
    }
}

/// Decides when the config file is due for a re-read, every `server.reload_interval` (0 disables
/// polling). Pure: it reads no clock, the caller passes `now`.
#[derive(Debug, Clone)]
pub struct FilePoller {
    interval: Duration,
    next: Instant,
}

impl FilePoller {
    /// A poller whose first re-read is due one `interval` after `now`.
    pub fn new(interval: Duration, now: Instant) -> Self {
        FilePoller {
            interval,
            next: now + interval,
        }
    }

    /// The interval in use; zero when polling is disabled.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Whether a re-read is due at `now`; when it is, the next one is due one interval later
    /// (missed intervals are not made up in a burst). Always false when the interval is zero.
    pub fn due(&mut self, now: Instant) -> bool {
        if self.interval.is_zero() || now < self.next {
            return false;
        }
        self.next = now + self.interval;
        true
    }

    /// When the next re-read is due; `None` when polling is off.
    pub fn next_due(&self) -> Option<Instant> {
        (!self.interval.is_zero()).then_some(self.next)
    }

    /// Takes a new interval (a reloaded `server.reload_interval`); when it differs, the next
    /// re-read is due one new interval after `now`.
    pub fn set_interval(&mut self, interval: Duration, now: Instant) {
        if interval != self.interval {
            self.interval = interval;
            self.next = now + interval;
        }
    }
}

/// A flag set on every SIGHUP, for the control thread to [`take_sighup`] and re-read the file.
/// Registering replaces SIGHUP's default action (terminating the process).
pub fn sighup_flag() -> io::Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&flag))?;
    Ok(flag)
}

/// Whether a SIGHUP arrived since the last call; clears the flag.
pub fn take_sighup(flag: &AtomicBool) -> bool {
    flag.swap(false, Ordering::AcqRel)
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    use inferrail_config::{document_of_yaml, parse_document, PolicyKind, RoutingReach};
    use inferrail_dataplane::predict::PredictionLimits;
    use inferrail_dataplane::snapshot::ConfigPart;
    use serde_json::{json, Value};

    use super::{sighup_flag, take_sighup, ConfigStore, FilePoller, Refusal};

    const BASE: &str = "\
server: {listen: 127.0.0.1:0, admin_listen: 127.0.0.1:0, reload_interval: 250ms}
models: [{name: m, tokenizer: builtin:sim}]
replicas: [{id: r0, url: 'http://127.0.0.1:8001', models: [m]}]
";

    /// A temporary config file, removed on drop.
    struct TempFile(std::path::PathBuf);

    impl TempFile {
        fn new(name: &str, text: &str) -> TempFile {
            let path = std::env::temp_dir().join(format!(
                "inferrail-live-config-{}-{name}.yaml",
                std::process::id()
            ));
            std::fs::write(&path, text).unwrap();
            TempFile(path)
        }

        fn write(&self, text: &str) {
            std::fs::write(&self.0, text).unwrap();
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn store_of(text: &str, path: Option<&Path>) -> ConfigStore {
        let doc = document_of_yaml(text).unwrap();
        let config = parse_document(&doc).unwrap();
        ConfigStore::new(path.map(Path::to_path_buf), doc, config)
    }

    #[test]
    fn a_valid_patch_applies_and_bumps_the_generation() {
        let mut store = store_of(BASE, None);
        assert_eq!(store.generation(), 1);
        let applied = store
            .patch(&json!({"routing": {"default_policy": "p2c", "epsilon": 0.5}}))
            .unwrap();
        assert_eq!(applied.generation, 2);
        assert_eq!(applied.config.routing.default_policy, PolicyKind::P2c);
        assert_eq!(store.generation(), 2);
        assert_eq!(store.config(), &applied.config);
        assert_eq!(store.document()["routing"]["epsilon"], json!(0.5));
        assert_eq!(
            store.document()["server"]["reload_interval"],
            json!("250ms")
        );
        // Deleting a setting brings back its default.
        let applied = store.patch(&json!({"routing": {"epsilon": null}})).unwrap();
        assert_eq!(applied.generation, 3);
        assert_eq!(applied.config.routing.epsilon, 1.0);
        // A patch that changes nothing keeps the generation.
        assert_eq!(store.patch(&json!({})).unwrap().generation, 3);
        assert_eq!(
            store
                .patch(&json!({"routing": {"default_policy": "p2c"}}))
                .unwrap()
                .generation,
            3
        );
        // The bounded-load floor is live like epsilon; 0 is refused naming its path.
        let applied = store
            .patch(&json!({"routing": {"bounded_load_floor": 2}}))
            .unwrap();
        assert_eq!(applied.generation, 4);
        assert_eq!(applied.config.routing.bounded_load_floor, 2);
        let refusal = store
            .patch(&json!({"routing": {"bounded_load_floor": 0}}))
            .unwrap_err();
        let Refusal::Invalid(problems) = &refusal else {
            panic!("expected Invalid, got {refusal:?}");
        };
        assert!(
            problems.at("routing.bounded_load_floor").is_some(),
            "{problems}"
        );
        let applied = store
            .patch(&json!({"routing": {"bounded_load_floor": null}}))
            .unwrap();
        assert_eq!(applied.config.routing.bounded_load_floor, 8);
    }

    #[test]
    fn an_invalid_patch_is_refused_whole() {
        let mut store = store_of(BASE, None);
        let before = store.config().clone();
        let refusal = store
            .patch(&json!({"routing": {"epsilon": 2}, "health": {"interval": "100ms"}, "replicas": [{"id": "r0"}]}))
            .unwrap_err();
        let Refusal::Invalid(problems) = &refusal else {
            panic!("expected Invalid, got {refusal:?}");
        };
        assert!(problems.at("health.timeout").is_some(), "{problems}");
        assert!(problems.at("replicas[0].url").is_some(), "{problems}");
        let message = refusal.to_string();
        assert!(
            message.starts_with("configuration refused, nothing applied; fix these problems:\n"),
            "{message}"
        );
        assert!(message.contains("replicas[0].url: required"), "{message}");
        // Nothing of it applied, not even the valid epsilon.
        assert_eq!(store.generation(), 1);
        assert_eq!(store.config(), &before);
        assert_eq!(store.document(), &document_of_yaml(BASE).unwrap());
        // Replacing the whole document with a non-object is refused too.
        assert!(matches!(store.patch(&json!([1])), Err(Refusal::Invalid(_))));
        assert!(matches!(
            store.patch(&json!(null)),
            Err(Refusal::Invalid(_))
        ));
        assert_eq!(store.generation(), 1);
    }

    #[test]
    fn a_patch_needing_a_restart_is_refused_whole_naming_the_paths() {
        let mut store = store_of(BASE, None);
        let refusal = store
            .patch(&json!({
                "server": {"cores": 3},
                "routing": {"epsilon": 2},
                "models": [{"name": "m", "tokenizer": "/models/other"}]
            }))
            .unwrap_err();
        assert_eq!(
            refusal,
            Refusal::RestartRequired(vec![
                "server.cores".to_string(),
                "models[m].tokenizer".to_string()
            ])
        );
        assert_eq!(
            refusal.to_string(),
            "configuration refused, nothing applied: server.cores, models[m].tokenizer need a restart to change"
        );
        assert_eq!(
            Refusal::RestartRequired(vec!["index.shards".to_string()]).to_string(),
            "configuration refused, nothing applied: index.shards needs a restart to change"
        );
        assert_eq!(store.generation(), 1);
        assert_eq!(store.config().routing.epsilon, 1.0);
        // Adding a model with its own tokenizer would leave it without predictions (tokenizers
        // are loaded at start-up): refused, naming it. Without a tokenizer it is live.
        let added = |tokenizer: Value| {
            json!({
                "models": [{"name": "m", "tokenizer": "builtin:sim"}, {"name": "n", "tokenizer": tokenizer}],
                "replicas": [{"id": "r0", "url": "http://127.0.0.1:8001", "models": ["m", "n"]}]
            })
        };
        assert_eq!(
            store.patch(&added(json!("builtin:sim"))).unwrap_err(),
            Refusal::RestartRequired(vec!["models[n].tokenizer".to_string()])
        );
        assert_eq!(store.generation(), 1);
        let applied = store.patch(&added(Value::Null)).unwrap();
        assert_eq!(applied.generation, 2);
        assert_eq!(applied.config.models.len(), 2);
    }

    #[test]
    fn a_model_removed_and_added_back_keeps_its_start_up_tokenizer() {
        let mut store = store_of(BASE, None);
        let models = |m: Value| {
            let served: Vec<Value> = m
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["name"].clone())
                .collect();
            json!({"models": m, "replicas": [{"id": "r0", "url": "http://127.0.0.1:8001", "models": served}]})
        };
        store.patch(&models(json!([{"name": "n"}]))).unwrap();
        assert_eq!(store.generation(), 2);
        // Back with another tokenizer: checked against the start-up config, not the last one.
        let back = json!([{"name": "n"}, {"name": "m", "tokenizer": "/models/other"}]);
        assert_eq!(
            store.patch(&models(back)).unwrap_err(),
            Refusal::RestartRequired(vec!["models[m].tokenizer".to_string()])
        );
        // Back as it started: its tokenizer is still loaded.
        let back = json!([{"name": "n"}, {"name": "m", "tokenizer": "builtin:sim"}]);
        assert_eq!(store.patch(&models(back)).unwrap().generation, 3);
    }

    /// The live class: the prediction settings a PATCH changes are the ones the next snapshot
    /// hands to requests.
    #[test]
    fn prediction_settings_patch_live_into_the_snapshot() {
        let mut store = store_of(BASE, None);
        let applied = store
            .patch(&json!({"tokenizer": {"max_wait": "0ms", "inline_max_bytes": 0}}))
            .unwrap();
        assert_eq!(applied.generation, 2);
        let part = ConfigPart::from_config(&applied.config, applied.generation, 0);
        assert_eq!(
            part.settings.prediction,
            PredictionLimits {
                max_wait: Duration::ZERO,
                inline_max_bytes: 0
            }
        );
    }

    /// The restart-only class: read once at start-up, so a change is refused naming it.
    #[test]
    fn settings_read_at_start_up_are_refused_by_patch_and_reload() {
        let file = TempFile::new("restart-only", BASE);
        let mut store = store_of(BASE, Some(&file.0));
        for (patch, path) in [
            (json!({"routing": {"seed": 7}}), "routing.seed"),
            (
                json!({"server": {"shutdown_timeout": "1s"}}),
                "server.shutdown_timeout",
            ),
            (json!({"tokenizer": {"workers": 3}}), "tokenizer.workers"),
        ] {
            assert_eq!(
                store.patch(&patch).unwrap_err(),
                Refusal::RestartRequired(vec![path.to_string()])
            );
        }
        file.write(&format!("{BASE}routing: {{seed: 7}}\n"));
        assert_eq!(
            store.reload_file(),
            Err(Refusal::RestartRequired(vec!["routing.seed".to_string()]))
        );
        assert_eq!(store.generation(), 1);
    }

    /// The refused class: not implemented, so refused naming the path, by PATCH and reload alike.
    #[test]
    fn tracing_settings_are_refused_by_patch_and_reload() {
        let file = TempFile::new("tracing", BASE);
        let mut store = store_of(BASE, Some(&file.0));
        let expect = |refusal: Refusal, path: &str| {
            let Refusal::Invalid(problems) = &refusal else {
                panic!("expected Invalid, got {refusal:?}");
            };
            assert_eq!(
                problems.at(path).map(|p| p.message.as_str()),
                Some("not implemented yet: traces are not exported; remove it"),
                "{problems}"
            );
        };
        expect(
            store
                .patch(&json!({"observability": {"otlp_endpoint": "http://c:4318"}}))
                .unwrap_err(),
            "observability.otlp_endpoint",
        );
        file.write(&format!(
            "{BASE}observability: {{trace_sample_ratio: 0.5}}\n"
        ));
        expect(
            store.reload_file().unwrap_err(),
            "observability.trace_sample_ratio",
        );
        assert_eq!(store.generation(), 1);
    }

    #[test]
    fn a_routing_change_every_model_shadows_says_so() {
        let text = BASE.replace(
            "tokenizer: builtin:sim}",
            "tokenizer: builtin:sim, policy: p2c}",
        );
        let mut store = store_of(&text, None);
        let before = store.config().clone();
        let applied = store
            .patch(&json!({"routing": {"default_policy": "random"}}))
            .unwrap();
        assert_eq!(applied.generation, 2);
        assert_eq!(
            applied.routing,
            [RoutingReach {
                path: "routing.default_policy".to_string(),
                affects: vec![],
                shadowed_by: vec!["models[m].policy".to_string()],
            }]
        );
        assert_eq!(
            applied.warnings(),
            [
                "routing.default_policy changes no routing decision: every model keeps its own \
              setting (models[m].policy)"
            ]
        );
        // And it is true of what the cores route with: the model's arms did not change.
        let arms =
            |c: &inferrail_config::Config| ConfigPart::from_config(c, 1, 0).models[0].arms.clone();
        assert_eq!(arms(&before), arms(&applied.config));

        // Once the model drops its own policy, the default reaches it, and its arms change.
        let applied = store
            .patch(&json!({"models": [{"name": "m", "tokenizer": "builtin:sim"}]}))
            .unwrap();
        assert!(applied.routing.is_empty(), "{:?}", applied.routing);
        assert_ne!(arms(&before), arms(&applied.config));
        let applied = store
            .patch(&json!({"routing": {"default_policy": "p2c", "epsilon": 2}}))
            .unwrap();
        assert_eq!(applied.routing.len(), 2);
        assert!(applied.routing.iter().all(|r| r.affects == ["m"]));
        assert!(applied.warnings().is_empty());
    }

    #[test]
    fn reload_file_applies_changes_once_and_refuses_bad_files() {
        let file = TempFile::new("reload", BASE);
        let mut store = store_of(BASE, Some(&file.0));
        // Unchanged contents (also on the first read: it is the start-up document).
        assert_eq!(store.reload_file(), Ok(None));
        assert_eq!(store.reload_file(), Ok(None));
        // Comments and layout only: nothing to apply.
        file.write(&format!("# a comment\n{BASE}\n"));
        assert_eq!(store.reload_file(), Ok(None));
        assert_eq!(store.generation(), 1);

        file.write(&format!("{BASE}routing: {{default_policy: round_robin}}\n"));
        let applied = store.reload_file().unwrap().unwrap();
        assert_eq!(applied.generation, 2);
        assert_eq!(
            applied.config.routing.default_policy,
            PolicyKind::RoundRobin
        );
        assert_eq!(store.reload_file(), Ok(None));

        // An invalid file is refused once, then not re-reported until it changes again.
        file.write(&format!("{BASE}routing: {{default_policy: nope}}\n"));
        let refusal = store.reload_file().unwrap_err();
        assert!(
            refusal
                .to_string()
                .contains("routing.default_policy: unknown policy \"nope\""),
            "{refusal}"
        );
        assert_eq!(store.reload_file(), Ok(None));
        assert_eq!(store.generation(), 2);
        assert_eq!(
            store.config().routing.default_policy,
            PolicyKind::RoundRobin
        );

        // YAML syntax errors and restart-only changes are refused too.
        file.write("models: [\n");
        assert!(matches!(store.reload_file(), Err(Refusal::Invalid(_))));
        file.write(&BASE.replace("127.0.0.1:0, admin", "127.0.0.1:7777, admin"));
        assert_eq!(
            store.reload_file(),
            Err(Refusal::RestartRequired(vec!["server.listen".to_string()]))
        );
        assert_eq!(store.generation(), 2);
        assert_eq!(
            store.config().routing.default_policy,
            PolicyKind::RoundRobin
        );
    }

    #[test]
    fn a_patch_lasts_until_the_file_changes() {
        let file = TempFile::new("patch-then-file", BASE);
        let mut store = store_of(BASE, Some(&file.0));
        store.patch(&json!({"routing": {"epsilon": 0.5}})).unwrap();
        assert_eq!(store.reload_file(), Ok(None));
        assert_eq!(store.config().routing.epsilon, 0.5);
        file.write(&format!("{BASE}retry: {{max_attempts: 1}}\n"));
        let applied = store.reload_file().unwrap().unwrap();
        assert_eq!(applied.generation, 3);
        assert_eq!(applied.config.retry.max_attempts, 1);
        assert_eq!(applied.config.routing.epsilon, 1.0);
    }

    #[test]
    fn reload_without_a_file_or_with_an_unreadable_one() {
        let mut store = store_of(BASE, None);
        assert_eq!(store.reload_file(), Err(Refusal::NoFile));
        assert_eq!(
            Refusal::NoFile.to_string(),
            "configuration not reloaded: the router was started without a config file"
        );
        let missing = Path::new("/nonexistent/inferrail.yaml");
        let mut store = store_of(BASE, Some(missing));
        let refusal = store.reload_file().unwrap_err();
        assert!(matches!(refusal, Refusal::Io(_)));
        assert!(
            refusal.to_string().starts_with(
                "configuration not reloaded: cannot read /nonexistent/inferrail.yaml: "
            ),
            "{refusal}"
        );
        assert_eq!(store.generation(), 1);
    }

    #[test]
    fn poller_is_due_once_per_interval_and_zero_disables_it() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut poller = FilePoller::new(ms(100), t0);
        assert!(!poller.due(t0));
        assert!(!poller.due(t0 + ms(99)));
        assert!(poller.due(t0 + ms(100)));
        assert!(!poller.due(t0 + ms(150)));
        // Late by many intervals: due once, not once per missed interval.
        assert!(poller.due(t0 + ms(1000)));
        assert!(!poller.due(t0 + ms(1050)));
        assert!(poller.due(t0 + ms(1100)));

        poller.set_interval(Duration::ZERO, t0 + ms(1100));
        assert_eq!(poller.interval(), Duration::ZERO);
        assert!(!poller.due(t0 + ms(100_000)));
        let mut disabled = FilePoller::new(Duration::ZERO, t0);
        assert!(!disabled.due(t0));
        assert!(!disabled.due(t0 + Duration::from_secs(3600)));

        // Re-enabled: due one new interval after the change.
        poller.set_interval(ms(500), t0 + ms(200_000));
        assert!(!poller.due(t0 + ms(200_499)));
        assert!(poller.due(t0 + ms(200_500)));
        // The same interval again does not move the schedule.
        poller.set_interval(ms(500), t0 + ms(200_900));
        assert!(poller.due(t0 + ms(201_000)));
    }

    #[test]
    fn sighup_sets_the_flag_until_taken() {
        let flag = sighup_flag().unwrap();
        assert!(!take_sighup(&flag));
        signal_hook::low_level::raise(signal_hook::consts::SIGHUP).unwrap();
        // The handler runs before raise returns (a signal to the calling thread).
        assert!(flag.load(Ordering::Acquire));
        assert!(take_sighup(&flag));
        assert!(!take_sighup(&flag));
    }
}
