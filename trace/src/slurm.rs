//! The Slurm job step a trace was recorded in, as the step's own environment describes it
//! (`SLURM_JOB_ID`, `SLURM_STEP_ID`, `SLURM_PROCID`, `SLURMD_NODENAME`, ...). Read once, in task 0
//! of the step (`evenflush wrap`), kept as `slurm` in `meta.json`, shown by `evenflush info`.

use serde::{Deserialize, Serialize};

/// The key of [`SlurmStep`] in `meta.json`.
pub const META_KEY: &str = "slurm";

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlurmStep {
    /// `SLURM_JOB_ID`.
    pub job_id: String,
    /// `SLURM_STEP_ID` (a number, or `batch`/`extern` outside an srun step).
    pub step_id: Option<String>,
    /// `SLURM_PROCID` of the task that wrote this: its rank among the step's tasks.
    pub procid: Option<u32>,
    /// `SLURMD_NODENAME`: the Slurm node that task ran on (may differ from the host name).
    pub node: Option<String>,
    /// `SLURM_STEP_NUM_TASKS` (or `SLURM_NTASKS`).
    pub ntasks: Option<u32>,
    /// `SLURM_STEP_NODELIST` (or `SLURM_JOB_NODELIST`), in Slurm's compressed form (`n[01-04]`).
    pub nodelist: Option<String>,
    /// `SLURM_CLUSTER_NAME`.
    pub cluster: Option<String>,
}

impl SlurmStep {
    /// The step described by `var` (the process environment, or a map in tests); `None` outside a
    /// Slurm job.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Option<SlurmStep> {
        let get = |name: &str| var(name).filter(|v| !v.is_empty());
        let either = |a: &str, b: &str| get(a).or_else(|| get(b));
        Some(SlurmStep {
            job_id: get("SLURM_JOB_ID").or_else(|| get("SLURM_JOBID"))?,
            step_id: either("SLURM_STEP_ID", "SLURM_STEPID"),
            procid: get("SLURM_PROCID").and_then(|v| v.parse().ok()),
            node: get("SLURMD_NODENAME"),
            ntasks: either("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS").and_then(|v| v.parse().ok()),
            nodelist: either("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"),
            cluster: get("SLURM_CLUSTER_NAME"),
        })
    }

    /// The step recorded in a trace's `meta.json`, if any.
    pub fn from_meta(meta: Option<&serde_json::Value>) -> Option<SlurmStep> {
        serde_json::from_value(meta?.get(META_KEY)?.clone()).ok()
    }

    /// A name for the run that every task of the step computes alike (`RankInfo.run_id`), and that
    /// names the job and step for whoever reads it.
    pub fn run_id(&self) -> String {
        match &self.step_id {
            Some(step) => format!("slurm-{}.{step}", self.job_id),
            None => format!("slurm-{}", self.job_id),
        }
    }

    /// One line for `evenflush info`: `job 12 step 0 on cluster c, 4 tasks on n[1-2] (task 0 on n1)`.
    pub fn describe(&self) -> String {
        let mut s = format!("job {}", self.job_id);
        if let Some(step) = &self.step_id {
            s += &format!(" step {step}");
        }
        if let Some(c) = &self.cluster {
            s += &format!(" on cluster {c}");
        }
        if let Some(n) = self.ntasks {
            s += &format!(", {n} tasks");
        }
        if let Some(nodes) = &self.nodelist {
            s += &format!(" on {nodes}");
        }
        if let (Some(p), Some(node)) = (self.procid, &self.node) {
            s += &format!(" (task {p} on {node})");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn outside_slurm_is_none() {
        assert_eq!(SlurmStep::from_env(env(&[("SLURM_PROCID", "0")])), None);
    }

    #[test]
    fn step_variables_are_read_and_survive_meta_json() {
        let step = SlurmStep::from_env(env(&[
            ("SLURM_JOB_ID", "42"),
            ("SLURM_STEP_ID", "3"),
            ("SLURM_PROCID", "0"),
            ("SLURMD_NODENAME", "n1"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_STEP_NUM_TASKS", "4"),
            ("SLURM_JOB_NODELIST", "n[1-4]"),
            ("SLURM_STEP_NODELIST", "n[1-2]"),
        ]))
        .unwrap();
        assert_eq!(step.run_id(), "slurm-42.3");
        assert_eq!(step.ntasks, Some(4));
        assert_eq!(step.nodelist.as_deref(), Some("n[1-2]"));
        assert_eq!(
            step.describe(),
            "job 42 step 3, 4 tasks on n[1-2] (task 0 on n1)"
        );
        let meta = serde_json::json!({ META_KEY: step });
        assert_eq!(SlurmStep::from_meta(Some(&meta)), Some(step));
    }
}
