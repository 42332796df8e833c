//! A strict reader of the OpenMetrics text the agent serves: every sample under its family's
//! HELP and TYPE, counters ending `_total`, names `lachesis_`-prefixed and ending in their
//! UNIT, no sample or label twice, `# EOF` last.

use std::collections::BTreeMap;

/// One scrape: (metric name, labels) → value.
#[derive(Debug, Default)]
pub struct Scrape {
    pub samples: BTreeMap<(String, BTreeMap<String, String>), f64>,
}

impl Scrape {
    /// The value of the one sample of `name` whose labels include `labels`.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let found: Vec<f64> = self
            .samples
            .iter()
            .filter(|((n, l), _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|(_, v)| *v)
            .collect();
        assert!(
            found.len() <= 1,
            "{name} {labels:?} matches {} samples",
            found.len()
        );
        found.first().copied()
    }

    /// The metric names sampled.
    pub fn names(&self) -> std::collections::BTreeSet<&str> {
        self.samples.keys().map(|(n, _)| n.as_str()).collect()
    }
}

/// Parses OpenMetrics text strictly: an error names the line.
pub fn parse(text: &str) -> Result<Scrape, String> {
    let mut out = Scrape::default();
    let (mut family, mut kind) = (String::new(), String::new());
    let lines: Vec<&str> = text.lines().collect();
    if lines.last() != Some(&"# EOF") || !text.ends_with("# EOF\n") {
        return Err("the text does not end with \"# EOF\"".into());
    }
    for (i, line) in lines[..lines.len() - 1].iter().enumerate() {
        let at = |m: &str| format!("line {}: {m}: {line:?}", i + 1);
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let (what, name, arg) = (parts.next(), parts.next(), parts.next());
            let (Some(what), Some(name)) = (what, name) else {
                return Err(at("a comment without a metric name"));
            };
            if !name.starts_with("lachesis_") {
                return Err(at("a name without the lachesis_ prefix"));
            }
            match what {
                "HELP" => (family, kind) = (name.to_string(), String::new()),
                "TYPE" if name == family => match arg {
                    Some(t @ ("counter" | "gauge")) => kind = t.to_string(),
                    _ => return Err(at("an unexpected metric type")),
                },
                "UNIT" if name == family => {
                    let unit = arg.ok_or_else(|| at("a UNIT without a unit"))?;
                    if !name.ends_with(&format!("_{unit}")) {
                        return Err(at("a name not ending in its unit"));
                    }
                }
                _ => return Err(at("a comment out of place")),
            }
            continue;
        }
        if kind.is_empty() {
            return Err(at("a sample before its family's TYPE"));
        }
        let (series, value) = line.rsplit_once(' ').ok_or_else(|| at("no value"))?;
        let value: f64 = value.parse().map_err(|_| at("the value is not a number"))?;
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (n, l.strip_suffix('}').ok_or_else(|| at("unclosed labels"))?),
            None => (series, ""),
        };
        let want = if kind == "counter" {
            format!("{family}_total")
        } else {
            family.clone()
        };
        if name != want {
            return Err(at(&format!("a sample of {name}, expected {want}")));
        }
        let mut set = BTreeMap::new();
        for pair in labels.split(',').filter(|p| !p.is_empty()) {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| at("a label without ="))?;
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .ok_or_else(|| at("an unquoted label"))?;
            if set.insert(k.to_string(), v.to_string()).is_some() {
                return Err(at("a label twice"));
            }
        }
        if out.samples.insert((name.to_string(), set), value).is_some() {
            return Err(at("a sample twice"));
        }
    }
    Ok(out)
}
