//! What a group of triggers served by one file asks of it: its trigger
//! text, label, compression and what their conditions matched.

use super::queue::Member;
use super::request::TriggerKind;
use super::scope::Scope;
use super::window::WallWindow;

/// The dump a group of triggers asks for: the first label given wins;
/// compressed if any trigger asked for it, plain if every trigger asked
/// for plain, else as `[snapshot] compression` says (None).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// "api", "signal", "condition:<name>" or several joined by "+".
    pub trigger: String,
    /// What the triggers were, each once, sorted.
    pub kinds: Vec<TriggerKind>,
    /// What the conditions among them matched, `condition:<name>: <what>`
    /// for the first firing of each, joined by "; "; empty without one.
    pub matched: String,
    pub label: Option<String>,
    pub compress: Option<bool>,
    /// Triggers served.
    pub triggers: usize,
    /// The window holding every trigger's.
    pub window: WallWindow,
    /// The part of the machine they ask for (one scope a batch).
    pub scope: Scope,
}

impl Spec {
    pub fn of<W>(members: &[Member<W>]) -> Spec {
        let mut kinds: Vec<TriggerKind> = Vec::new();
        let mut matched: Vec<String> = Vec::new();
        let mut compress = None;
        for (i, m) in members.iter().enumerate() {
            if !kinds.contains(&m.kind) {
                if let Some(what) = &m.matched {
                    matched.push(format!("{}: {what}", m.kind.describe()));
                }
                kinds.push(m.kind.clone());
            }
            compress = match (compress, m.compress) {
                (Some(true), _) | (_, Some(true)) => Some(true),
                (Some(false), Some(false)) => Some(false),
                // The first trigger decides until another disagrees.
                (c, None) | (None, c) if i == 0 => c,
                _ => None,
            };
        }
        kinds.sort();
        Spec {
            trigger: kinds
                .iter()
                .map(TriggerKind::describe)
                .collect::<Vec<_>>()
                .join("+"),
            kinds,
            matched: matched.join("; "),
            label: members.iter().find_map(|m| m.label.clone()),
            compress,
            triggers: members.len(),
            window: WallWindow::cover(members.iter().map(|m| &m.window)),
            scope: members.first().map(|m| m.scope.clone()).unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(kind: TriggerKind, compress: Option<bool>) -> Member<()> {
        Member {
            kind,
            label: None,
            compress,
            window: WallWindow::default(),
            matched: None,
            scope: Scope::default(),
            waiter: None,
        }
    }

    #[test]
    fn compression_is_asked_by_any_refused_only_by_all() {
        let of = |wishes: &[Option<bool>]| {
            let members: Vec<_> = wishes
                .iter()
                .map(|&w| member(TriggerKind::Api, w))
                .collect();
            Spec::of(&members).compress
        };
        assert_eq!(of(&[None]), None);
        assert_eq!(of(&[Some(false)]), Some(false));
        assert_eq!(of(&[Some(false), Some(false)]), Some(false));
        assert_eq!(of(&[Some(false), None]), None);
        assert_eq!(of(&[None, Some(false)]), None);
        assert_eq!(of(&[None, Some(true), Some(false)]), Some(true));
    }

    #[test]
    fn what_each_condition_first_matched_is_kept_and_the_first_label_wins() {
        let fired = |name: &str, what: &str| Member {
            matched: Some(what.into()),
            ..member(TriggerKind::Condition(name.into()), None)
        };
        let mut labelled = member(TriggerKind::Api, None);
        labelled.label = Some("b".into());
        let members = vec![
            fired("oom", "oom:mark_victim pid 42 (java)"),
            member(TriggerKind::Signal, None),
            // A second firing of the same condition adds nothing.
            fired("oom", "oom:mark_victim pid 43 (java)"),
            fired("stall", "pressure some avg10=40.00"),
            labelled,
        ];
        let spec = Spec::of(&members);
        assert_eq!(spec.trigger, "api+signal+condition:oom+condition:stall");
        assert_eq!(
            spec.matched,
            "condition:oom: oom:mark_victim pid 42 (java); condition:stall: pressure some avg10=40.00"
        );
        assert_eq!(spec.label.as_deref(), Some("b"));
        assert_eq!(spec.triggers, 5);
        assert_eq!(Spec::of(&[member(TriggerKind::Api, None)]).matched, "");
    }
}
