//! The rules file: a JSON array of rules in the bus `rule` shape
//! (`api-schemas/bus/common.schema.json`), or an object with a `rules` array.

use std::path::Path;

use lachesis_switch::Rule;

/// Reads and checks a rules file; the error names the file and what is wrong where.
pub fn load_rules(path: &Path) -> Result<Vec<Rule>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("rules file {}: {e}", path.display()))?;
    parse_rules(&text).map_err(|e| format!("rules file {}: {e}", path.display()))
}

pub fn parse_rules(text: &str) -> Result<Vec<Rule>, String> {
    // Parse as a value first so errors point at the rule that is wrong.
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let list = match &v {
        serde_json::Value::Array(a) => a.clone(),
        serde_json::Value::Object(o) => match o.get("rules") {
            Some(serde_json::Value::Array(a)) if o.len() == 1 => a.clone(),
            _ => return Err("expected an array of rules or {\"rules\": [...]}".into()),
        },
        _ => return Err("expected an array of rules or {\"rules\": [...]}".into()),
    };
    let mut rules = Vec::with_capacity(list.len());
    for (i, r) in list.into_iter().enumerate() {
        rules.push(serde_json::from_value::<Rule>(r).map_err(|e| format!("rules[{i}]: {e}"))?);
    }
    // Same checks as the table (duplicate names, empty ranges) before anything mounts.
    lachesis_switch::RuleTable::build(rules.clone()).map_err(|e| e.to_string())?;
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_both_shapes_and_names_the_bad_rule() {
        let r = r#"{"name": "a", "priority": 1, "match": {"tenant": "t"},
                   "detours": [{"what": "io", "to": {"kind": "stage", "target": "cache"}}]}"#;
        assert_eq!(parse_rules(&format!("[{r}]")).unwrap().len(), 1);
        assert_eq!(
            parse_rules(&format!("{{\"rules\": [{r}]}}")).unwrap().len(),
            1
        );
        let e = parse_rules(&format!("[{r}, {{\"name\": \"b\"}}]")).unwrap_err();
        assert!(e.starts_with("rules[1]"), "{e}");
        let e = parse_rules(&format!("[{r}, {r}]")).unwrap_err();
        assert!(e.contains("duplicate"), "{e}");
        assert!(parse_rules("{\"rules\": 3}").is_err());
        assert!(parse_rules("not json").is_err());
    }
}
