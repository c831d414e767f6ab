//! More ranks than cores on a host. There the recorder's measured cost (DP) also holds the time a
//! rank was descheduled inside the recorder, and a wait may end when the partner got a core
//! rather than when it sent: neither model can tell that apart from the program's own time. The
//! tools say so rather than print a figure that looks exact.

use std::collections::BTreeMap;

use serde::Serialize;

/// A host that ran more ranks than it had cores for the job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Crowding {
    pub host: String,
    pub ranks: usize,
    pub cpus: u64,
}

/// The launcher writes the cores its host gives the job (`host_cpus` in `meta.json`, with
/// `host`); other hosts' cores are not known.
pub fn crowded_hosts(
    meta: Option<&serde_json::Value>,
    hosts: &BTreeMap<String, Vec<u32>>,
) -> Vec<Crowding> {
    let Some(meta) = meta else {
        return Vec::new();
    };
    let (Some(host), Some(cpus)) = (
        meta.get("host").and_then(|h| h.as_str()),
        meta.get("host_cpus").and_then(|c| c.as_u64()),
    ) else {
        return Vec::new();
    };
    hosts
        .get(host)
        .filter(|ranks| ranks.len() as u64 > cpus)
        .map(|ranks| Crowding {
            host: host.to_string(),
            ranks: ranks.len(),
            cpus,
        })
        .into_iter()
        .collect()
}

/// Above this share of a rank's span, DP is more than the recorder spends: the rank was
/// descheduled inside it (a few per cent is what the recorder costs an MPI-heavy program).
pub const DP_SHARE_UNRELIABLE: f64 = 0.2;

/// What a user must read before trusting T(G) on these hosts, one line each.
pub fn warnings(crowded: &[Crowding]) -> Vec<String> {
    crowded
        .iter()
        .map(|c| {
            format!(
                "host {}: {} ranks on {} cores (oversubscribed): DP includes time ranks were \
                 descheduled and waits end when a partner got a core, so T(G) is not a reliable \
                 estimate of the untraced run here",
                c.host, c.ranks, c.cpus
            )
        })
        .collect()
}

/// The warning for a rank whose DP is beyond what the recorder can cost.
pub fn dp_warning(rank: u32, dp_s: f64, span_s: f64) -> Option<String> {
    (span_s > 0.0 && dp_s > DP_SHARE_UNRELIABLE * span_s).then(|| {
        format!(
            "rank {rank}: the recorder's cost DP is {:.0} % of its span, more than recording \
             costs: the rank was likely descheduled inside the recorder (more ranks than cores?), \
             so DP is unreliable and T(G) with it",
            100.0 * dp_s / span_s
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_with_more_ranks_than_cores_is_named() {
        let meta = serde_json::json!({"host": "vm", "host_cpus": 2});
        let mut hosts = BTreeMap::new();
        hosts.insert("vm".to_string(), vec![0, 1]);
        assert!(crowded_hosts(Some(&meta), &hosts).is_empty());
        hosts.insert("vm".to_string(), vec![0, 1, 2]);
        hosts.insert("other".to_string(), vec![3, 4, 5, 6]);
        let crowded = crowded_hosts(Some(&meta), &hosts);
        assert_eq!(
            crowded,
            vec![Crowding {
                host: "vm".into(),
                ranks: 3,
                cpus: 2
            }]
        );
        assert!(warnings(&crowded)[0].contains("3 ranks on 2 cores"));
        assert!(crowded_hosts(None, &hosts).is_empty());
    }

    #[test]
    fn dp_beyond_a_fifth_of_the_span_is_flagged() {
        assert!(dp_warning(0, 0.01, 1.0).is_none());
        assert!(dp_warning(3, 0.041, 0.043).unwrap().contains("rank 3"));
    }
}
