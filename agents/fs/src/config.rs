//! The rules file of `lachesis-fs mount`: a JSON array of rules in the bus `rule` shape
//! (`api-schemas/bus/common.schema.json`), or an object `{"rules": [...], "stages": [...]}`
//! whose `stages` are the stage contract's (`#/$defs/stage`, as in desired state), the
//! stages the rules name by `{"kind": "stage", "target": NAME}`.

use std::path::Path;

use lachesis_switch::{check_stages, DetourKind, DetourWhat, Rule, StageConfig};

/// What a rules file declares.
#[derive(Debug, Clone, Default)]
pub struct RulesFile {
    pub rules: Vec<Rule>,
    pub stages: Vec<StageConfig>,
}

/// Reads and checks a rules file; the error names the file and what is wrong where.
pub fn load(path: &Path) -> Result<RulesFile, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("rules file {}: {e}", path.display()))?;
    parse(&text).map_err(|e| format!("rules file {}: {e}", path.display()))
}

/// The rules of a rules file (its stages checked, then left out).
pub fn parse_rules(text: &str) -> Result<Vec<Rule>, String> {
    parse(text).map(|f| f.rules)
}

const SHAPE: &str = "expected an array of rules or {\"rules\": [...], \"stages\": [...]}";

pub fn parse(text: &str) -> Result<RulesFile, String> {
    // Parse as a value first so errors point at the rule or stage that is wrong.
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let (list, stage_list) = match &v {
        serde_json::Value::Array(a) => (a.clone(), Vec::new()),
        serde_json::Value::Object(o) => {
            if let Some(k) = o.keys().find(|k| *k != "rules" && *k != "stages") {
                return Err(format!("unknown key {k:?}: {SHAPE}"));
            }
            let rules = match o.get("rules") {
                Some(serde_json::Value::Array(a)) => a.clone(),
                _ => return Err(SHAPE.into()),
            };
            let stages = match o.get("stages") {
                None => Vec::new(),
                Some(serde_json::Value::Array(a)) => a.clone(),
                Some(_) => return Err(format!("stages: {SHAPE}")),
            };
            (rules, stages)
        }
        _ => return Err(SHAPE.into()),
    };
    let mut rules = Vec::with_capacity(list.len());
    for (i, r) in list.into_iter().enumerate() {
        rules.push(serde_json::from_value::<Rule>(r).map_err(|e| format!("rules[{i}]: {e}"))?);
    }
    let mut stages = Vec::with_capacity(stage_list.len());
    for (i, s) in stage_list.into_iter().enumerate() {
        stages.push(
            serde_json::from_value::<StageConfig>(s).map_err(|e| format!("stages[{i}]: {e}"))?,
        );
    }
    check_stages(&stages)?;
    // Same checks as the table (duplicate names, empty ranges) before anything mounts.
    lachesis_switch::RuleTable::build(rules.clone()).map_err(|e| e.to_string())?;
    for r in &rules {
        for (i, d) in r.detours.iter().enumerate() {
            let named = d.what == DetourWhat::Io && d.to.kind == DetourKind::Stage;
            if named && !stages.iter().any(|s| s.name() == d.to.target) {
                return Err(format!(
                    "rule {:?}: detours[{i}]: stage {:?} is not declared in \"stages\"",
                    r.name, d.to.target
                ));
            }
        }
    }
    Ok(RulesFile { rules, stages })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_both_shapes_and_names_the_bad_rule_or_stage() {
        let r = r#"{"name": "a", "priority": 1, "match": {"tenant": "t"},
                   "detours": [{"what": "io", "to": {"kind": "stage", "target": "cache/t"}}]}"#;
        let s = r#"{"kind": "cache", "name": "cache/t", "owner": "t", "engine": "dram",
                    "size_bytes": 1048576, "write_mode": "back", "eviction": "lru",
                    "max_dirty_bytes": 65536, "device": null, "placement": [], "next": null}"#;
        let f = parse(&format!("{{\"rules\": [{r}], \"stages\": [{s}]}}")).unwrap();
        assert_eq!((f.rules.len(), f.stages.len()), (1, 1));
        assert_eq!(f.stages[0].name(), "cache/t");
        // A stage the rules name must be declared.
        let e = parse(&format!("[{r}]")).unwrap_err();
        assert!(
            e.contains("rule \"a\"") && e.contains("\"cache/t\" is not declared"),
            "{e}"
        );
        let plain = r#"{"name": "p", "priority": 1, "match": {},
                        "detours": [{"what": "io", "to": {"kind": "file", "target": "/tmp/x"}}]}"#;
        assert_eq!(parse_rules(&format!("[{plain}]")).unwrap().len(), 1);
        assert_eq!(
            parse_rules(&format!("{{\"rules\": [{plain}]}}"))
                .unwrap()
                .len(),
            1
        );
        let e = parse_rules(&format!("[{plain}, {{\"name\": \"b\"}}]")).unwrap_err();
        assert!(e.starts_with("rules[1]"), "{e}");
        let e = parse_rules(&format!("[{plain}, {plain}]")).unwrap_err();
        assert!(e.contains("duplicate"), "{e}");
        let bad = s.replace("\"dram\"", "\"tape\"");
        let e = parse(&format!("{{\"rules\": [{r}], \"stages\": [{bad}]}}")).unwrap_err();
        assert!(e.starts_with("stages[0]"), "{e}");
        let e = parse(&format!("{{\"rules\": [{r}], \"stages\": [{s}, {s}]}}")).unwrap_err();
        assert!(e.contains("declared twice"), "{e}");
        let e = parse("{\"rules\": [], \"colour\": 1}").unwrap_err();
        assert!(e.contains("unknown key \"colour\""), "{e}");
        assert!(parse_rules("{\"rules\": 3}").is_err());
        assert!(parse_rules("not json").is_err());
    }

    #[test]
    fn the_fixture_desired_state_stages_and_rules_load() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../api-schemas/fixtures/desired-state/valid-stages.json"
        ))
        .unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let file = serde_json::json!({"rules": v["rules"], "stages": v["stages"]});
        let f = parse(&file.to_string()).unwrap();
        assert_eq!(f.stages.len(), 4);
        assert_eq!(f.rules.len(), v["rules"].as_array().unwrap().len());
    }
}
