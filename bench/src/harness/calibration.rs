//! The gateway's cost model as a user would get it: measured with `inferrail calibrate` against
//! a simulator, not copied from the simulators' flags. One throwaway simulator per distinct
//! setup (its flags and tokenizer), measured once per harness process; every run of that setup
//! reuses the fit, so all of a sweep's cost_model runs price with the same coefficients.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use inferrail_config::CostModelParams;

use super::fleet::{binary, free_port, health, sim_command, wait_until, ChildGuard, BLOCK_SIZE};
use super::HarnessError;

/// Fits already measured, by simulator setup; cloning shares them.
#[derive(Debug, Clone, Default)]
pub struct Calibrations(Arc<Mutex<HashMap<String, CostModelParams>>>);

impl Calibrations {
    /// The fit for simulators started with `sim_args` and `tokenizer`: measured on first use
    /// (a simulator started in `work_dir`, calibrated, killed), then remembered. Concurrent
    /// callers wait for the one measurement rather than each starting their own.
    pub fn cost_model(
        &self,
        bin_dir: &Path,
        sim_args: &[String],
        tokenizer: Option<&str>,
        work_dir: &Path,
    ) -> Result<CostModelParams, HarnessError> {
        let key = serde_json::json!([sim_args, tokenizer]).to_string();
        let mut fits = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(fit) = fits.get(&key) {
            return Ok(*fit);
        }
        let fit = measure(bin_dir, sim_args, tokenizer, work_dir)?;
        fits.insert(key, fit);
        Ok(fit)
    }
}

/// Starts one simulator as a fleet's would be, runs `inferrail calibrate --url` against it and
/// returns the fitted `routing.cost_model` (the simulator is killed on return).
pub fn measure(
    bin_dir: &Path,
    sim_args: &[String],
    tokenizer: Option<&str>,
    work_dir: &Path,
) -> Result<CostModelParams, HarnessError> {
    let sim_bin = binary(bin_dir, "inferrail-sim")?;
    let gw_bin = binary(bin_dir, "inferrail")?;
    std::fs::create_dir_all(work_dir).map_err(|source| HarnessError::Io {
        path: work_dir.to_path_buf(),
        source,
    })?;
    let port = free_port()?;
    let mut guard = ChildGuard::default();
    let name = "calibrate-sim";
    let cmd = sim_command(&sim_bin, port, 0, sim_args, tokenizer);
    guard.push(name.into(), super::fleet::spawn(cmd, name, work_dir)?);
    let log = work_dir.join(format!("{name}.log"));
    wait_until(&mut guard, name, &log, port, |p| health(p, "/health"))?;
    let out = Command::new(&gw_bin)
        .arg("calibrate")
        .args(["--url", &format!("http://127.0.0.1:{port}")])
        .args(["--block-size", &BLOCK_SIZE.to_string()])
        .output()
        .map_err(|source| HarnessError::Spawn {
            what: "inferrail calibrate".into(),
            source,
        })?;
    let failed = |why: String| HarnessError::Calibrate {
        log: log.clone(),
        why,
    };
    if !out.status.success() {
        return Err(failed(format!(
            "exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    fragment_cost_model(&text).map_err(failed)
}

/// The `routing.cost_model` of a calibrate fragment (its YAML read back by the config crate's
/// own YAML reader).
pub fn fragment_cost_model(text: &str) -> Result<CostModelParams, String> {
    let doc = inferrail_config::document_of_yaml(text).map_err(|e| e.to_string())?;
    let section = doc
        .get("routing")
        .and_then(|r| r.get("cost_model"))
        .ok_or("no routing.cost_model in calibrate's output")?;
    serde_json::from_value(section.clone()).map_err(|e| format!("routing.cost_model: {e}"))
}

/// `p` with every coefficient multiplied by `scale`: every time it predicts is `scale` times
/// as long.
pub fn scaled(p: CostModelParams, scale: f64) -> CostModelParams {
    CostModelParams {
        prefill_token_secs: p.prefill_token_secs * scale,
        prefill_pair_secs: p.prefill_pair_secs * scale,
        prefill_fixed_secs: p.prefill_fixed_secs * scale,
        decode_interference_secs: p.decode_interference_secs * scale,
        cpu_load_token_secs: p.cpu_load_token_secs * scale,
        storage_load_token_secs: p.storage_load_token_secs * scale,
    }
}

/// `p` with the coefficients `factors` names (by their config keys,
/// [`inferrail_config::COST_MODEL_KEYS`]) multiplied by their factors; a name that is not a
/// coefficient is refused with its name.
pub fn with_factors(
    p: CostModelParams,
    factors: &BTreeMap<String, f64>,
) -> Result<CostModelParams, String> {
    let mut fields = match serde_json::to_value(p) {
        Ok(serde_json::Value::Object(fields)) => fields,
        _ => return Err("cost_model parameters are not a map of coefficients".into()),
    };
    for (name, factor) in factors {
        let coefficient = fields
            .get_mut(name)
            .and_then(|v| v.as_f64())
            .ok_or_else(|| format!("{name} is not a cost_model coefficient"))?;
        fields.insert(name.clone(), serde_json::Value::from(coefficient * factor));
    }
    serde_json::from_value(serde_json::Value::Object(fields)).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_fragment_calibrate_prints() {
        let text = "# inferrail calibrate --url http://127.0.0.1:1: 24 probes of m\n\
                    routing:\n  cost_model:\n    prefill_token_secs: 0.000093022\n    \
                    prefill_pair_secs: 4.3219e-9\n    prefill_fixed_secs: 0.010143\n    \
                    decode_interference_secs: 0.0003\n    cpu_load_token_secs: 5e-6\n    \
                    storage_load_token_secs: 0.000025\n";
        let p = fragment_cost_model(text).expect("parses");
        assert_eq!(p.prefill_token_secs, 0.000093022);
        assert_eq!(p.prefill_pair_secs, 4.3219e-9);
        assert_eq!(p.prefill_fixed_secs, 0.010143);
        assert_eq!(p.storage_load_token_secs, 0.000025);
    }

    #[test]
    fn a_fragment_without_the_section_is_an_error() {
        assert!(fragment_cost_model("models: []\n").is_err());
        assert!(fragment_cost_model("routing: {cost_model: {prefill_token_secs: x}}").is_err());
    }

    #[test]
    fn a_factor_changes_its_coefficient_only_and_every_config_key_has_one() {
        let p = CostModelParams::default();
        let keys: Vec<String> = serde_json::to_value(p)
            .unwrap()
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        let mut listed: Vec<String> = inferrail_config::COST_MODEL_KEYS
            .iter()
            .map(|k| k.to_string())
            .collect();
        listed.sort();
        let mut keys_sorted = keys.clone();
        keys_sorted.sort();
        assert_eq!(listed, keys_sorted, "the list is the config's coefficients");
        for key in &keys {
            let factors: BTreeMap<String, f64> = [(key.clone(), 2.0)].into_iter().collect();
            let q = serde_json::to_value(with_factors(p, &factors).unwrap()).unwrap();
            let before = serde_json::to_value(p).unwrap();
            for other in &keys {
                let (a, b) = (before[other].as_f64().unwrap(), q[other].as_f64().unwrap());
                if other == key {
                    assert_eq!(b, a * 2.0, "{key} doubled");
                } else {
                    assert_eq!(b, a, "{other} untouched by a factor on {key}");
                }
            }
        }
        let bad: BTreeMap<String, f64> = [("kappa".to_string(), 2.0)].into_iter().collect();
        assert!(with_factors(p, &bad).unwrap_err().contains("kappa"));
    }

    #[test]
    fn scaling_multiplies_every_prediction() {
        let p = CostModelParams::default();
        for s in [0.5, 2.0] {
            let q = scaled(p, s);
            for (u, c) in [(1, 0), (500, 0), (300, 2000)] {
                let (a, b) = (p.prefill_secs(u, c), q.prefill_secs(u, c));
                assert!((b - a * s).abs() <= 1e-12 * a.max(1.0), "{u} {c}: {a} {b}");
            }
        }
    }
}
