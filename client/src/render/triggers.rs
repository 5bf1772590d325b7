//! `snapctl triggers`: the configured triggers and their counters (also
//! the `triggers` key of `snapctl status --json`).

use flightrec_proto::v1 as pb;
use serde_json::{Value, json};

use super::format::{table, utc};

pub(super) fn triggers_json(r: &pb::StatusReply) -> Value {
    r.triggers
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "on": t.on,
                "condition": t.condition,
                "fired": t.fired,
                "dumped": t.dumped,
                "suppressed": t.suppressed,
                "last_fired_unix_ns": t.last_fired_unix_ns,
                "last_matched": t.last_matched,
                "scope": t.scope,
            })
        })
        .collect()
}

/// `snapctl triggers`: each configured trigger with its counters.
pub fn triggers(r: &pb::StatusReply, as_json: bool) -> String {
    if as_json {
        return json!({ "triggers": triggers_json(r) }).to_string();
    }
    if r.triggers.is_empty() {
        return "no triggers configured (add [[trigger]] tables to the config)".into();
    }
    let rows: Vec<Vec<String>> = r.triggers.iter().map(trigger_row).collect();
    table(
        &[
            "NAME",
            "ON",
            "FIRED",
            "DUMPED",
            "SUPPRESSED",
            "LAST FIRED",
            "SCOPE",
            "CONDITION",
        ],
        &rows,
    )
}

fn trigger_row(t: &pb::TriggerStatus) -> Vec<String> {
    vec![
        t.name.clone(),
        t.on.clone(),
        t.fired.to_string(),
        t.dumped.to_string(),
        t.suppressed.to_string(),
        if t.last_fired_unix_ns == 0 {
            "never".into()
        } else {
            utc(t.last_fired_unix_ns)
        },
        if t.scope.is_empty() {
            "machine".into()
        } else {
            t.scope.clone()
        },
        t.condition.clone(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triggers_are_a_table_with_never_for_those_that_did_not_fire() {
        let mut r = pb::StatusReply::default();
        assert_eq!(
            triggers(&r, false),
            "no triggers configured (add [[trigger]] tables to the config)"
        );
        assert_eq!(triggers(&r, true), r#"{"triggers":[]}"#);
        r.triggers = vec![pb::TriggerStatus {
            name: "oom".into(),
            on: "kmsg".into(),
            condition: "Out of memory".into(),
            fired: 2,
            dumped: 1,
            suppressed: 1,
            scope: "matched".into(),
            ..Default::default()
        }];
        let text = triggers(&r, false);
        assert_eq!(
            text.lines().nth(1),
            Some("oom   kmsg  2      1       1           never       matched  Out of memory")
        );
        let v: Value = serde_json::from_str(&triggers(&r, true)).unwrap();
        assert_eq!(v["triggers"][0]["condition"], "Out of memory");
        assert_eq!(v["triggers"][0]["scope"], "matched");
    }
}
