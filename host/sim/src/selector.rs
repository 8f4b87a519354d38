//! Label and field selectors, as the API server parses them.

use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq)]
enum Op {
    Eq,
    NotEq,
    In,
    NotIn,
    Exists,
    NotExists,
    Gt,
    Lt,
}

#[derive(Debug, Clone, PartialEq)]
struct Req {
    key: String,
    op: Op,
    values: Vec<String>,
}

/// A parsed label selector: every requirement must hold (comma = AND).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<Req>);

fn split_top_level(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

impl LabelSelector {
    /// Parses the string form (`k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`,
    /// `k>1`, `k<1`; terms joined by commas).
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self(reqs));
        }
        for term in split_top_level(s) {
            let t = term.trim();
            if t.is_empty() {
                return Err(format!(
                    "unable to parse requirement: found '', expected: identifier in {s:?}"
                ));
            }
            let req = if let Some(key) = t.strip_prefix('!') {
                Req {
                    key: key.trim().to_string(),
                    op: Op::NotExists,
                    values: vec![],
                }
            } else if let Some(open) = t.find('(') {
                let head: Vec<&str> = t[..open].split_whitespace().collect();
                let close = t
                    .rfind(')')
                    .ok_or_else(|| format!("found '', expected: ')' in {s:?}"))?;
                let values = t[open + 1..close]
                    .split(',')
                    .map(|v| v.trim().to_string())
                    .filter(|v| !v.is_empty())
                    .collect();
                let op = match head.get(1).copied() {
                    Some("in") => Op::In,
                    Some("notin") => Op::NotIn,
                    _ => return Err(format!("unable to parse requirement: {t:?}")),
                };
                Req {
                    key: head[0].to_string(),
                    op,
                    values,
                }
            } else if let Some((k, v)) = t.split_once("!=") {
                Req {
                    key: k.trim().into(),
                    op: Op::NotEq,
                    values: vec![v.trim().into()],
                }
            } else if let Some((k, v)) = t.split_once("==") {
                Req {
                    key: k.trim().into(),
                    op: Op::Eq,
                    values: vec![v.trim().into()],
                }
            } else if let Some((k, v)) = t.split_once('=') {
                Req {
                    key: k.trim().into(),
                    op: Op::Eq,
                    values: vec![v.trim().into()],
                }
            } else if let Some((k, v)) = t.split_once('>') {
                Req {
                    key: k.trim().into(),
                    op: Op::Gt,
                    values: vec![v.trim().into()],
                }
            } else if let Some((k, v)) = t.split_once('<') {
                Req {
                    key: k.trim().into(),
                    op: Op::Lt,
                    values: vec![v.trim().into()],
                }
            } else if t.split_whitespace().count() == 1 {
                Req {
                    key: t.into(),
                    op: Op::Exists,
                    values: vec![],
                }
            } else {
                return Err(format!("unable to parse requirement: {t:?}"));
            };
            if req.key.is_empty() || req.key.contains(char::is_whitespace) {
                return Err(format!("invalid label key {:?}", req.key));
            }
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    /// Builds a selector from a `metav1.LabelSelector` object (`matchLabels`, `matchExpressions`).
    /// `None` means the object is malformed; an empty object selects everything.
    pub fn from_object(sel: &Value) -> Option<Self> {
        let mut reqs = Vec::new();
        if let Some(ml) = sel.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in ml {
                reqs.push(Req {
                    key: k.clone(),
                    op: Op::Eq,
                    values: vec![v.as_str()?.to_string()],
                });
            }
        }
        if let Some(exprs) = sel.get("matchExpressions").and_then(Value::as_array) {
            for e in exprs {
                let key = e.get("key")?.as_str()?.to_string();
                let values: Vec<String> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                let op = match e.get("operator")?.as_str()? {
                    "In" => Op::In,
                    "NotIn" => Op::NotIn,
                    "Exists" => Op::Exists,
                    "DoesNotExist" => Op::NotExists,
                    _ => return None,
                };
                reqs.push(Req { key, op, values });
            }
        }
        Some(Self(reqs))
    }

    /// True when the selector has no requirement (selects everything).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether a label map satisfies every requirement.
    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        self.0.iter().all(|r| {
            let v = labels.and_then(|l| l.get(&r.key)).and_then(Value::as_str);
            match r.op {
                Op::Eq | Op::In => v.is_some_and(|v| r.values.iter().any(|x| x == v)),
                Op::NotEq | Op::NotIn => v.is_none_or(|v| !r.values.iter().any(|x| x == v)),
                Op::Exists => v.is_some(),
                Op::NotExists => v.is_none(),
                Op::Gt | Op::Lt => {
                    let (Some(v), Some(bound)) = (
                        v.and_then(|v| v.parse::<i64>().ok()),
                        r.values[0].parse::<i64>().ok(),
                    ) else {
                        return false;
                    };
                    if r.op == Op::Gt { v > bound } else { v < bound }
                }
            }
        })
    }
}

/// A parsed field selector (`path=value`, `path==value`, `path!=value`, comma = AND).
#[derive(Debug, Clone, Default)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses the string form of a field selector.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut out = Vec::new();
        for term in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (k, eq, v) = if let Some((k, v)) = term.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = term.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = term.split_once('=') {
                (k, true, v)
            } else {
                return Err(format!(
                    "invalid selector: '{s}'; can't understand '{term}'"
                ));
            };
            out.push((k.trim().to_string(), eq, v.trim().to_string()));
        }
        Ok(Self(out))
    }

    /// Whether the object's fields satisfy every term (a missing field reads as "").
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(path, eq, want)| {
            let mut cur = Some(obj);
            for part in path.split('.') {
                cur = cur.and_then(|c| c.get(part));
            }
            let have = match cur {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Bool(b)) => b.to_string(),
                Some(Value::Number(n)) => n.to_string(),
                _ => String::new(),
            };
            (have == *want) == *eq
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn m(sel: &str, labels: Value) -> bool {
        LabelSelector::parse(sel)
            .unwrap()
            .matches(labels.as_object())
    }

    #[test]
    fn every_form() {
        let l = json!({"app": "web", "tier": "front", "n": "5"});
        assert!(m("app=web", l.clone()));
        assert!(m("app==web", l.clone()));
        assert!(!m("app!=web", l.clone()));
        assert!(m("missing!=x", l.clone()));
        assert!(m("app in (web, db)", l.clone()));
        assert!(m("app in (web,db),tier", l.clone()));
        assert!(!m("app notin (web,db)", l.clone()));
        assert!(m("missing notin (web)", l.clone()));
        assert!(m("tier", l.clone()));
        assert!(!m("!tier", l.clone()));
        assert!(m("!missing", l.clone()));
        assert!(m("n>4,n<6", l.clone()));
        assert!(!m("app=web,tier=back", l.clone()));
        assert!(m("", l));
        assert!(LabelSelector::parse("app in (a").is_err());
        assert!(LabelSelector::parse("a b c").is_err());
    }

    #[test]
    fn field_selector() {
        let o =
            json!({"metadata": {"name": "x", "namespace": "ns"}, "status": {"phase": "Running"}});
        assert!(FieldSelector::parse("metadata.name=x").unwrap().matches(&o));
        assert!(
            FieldSelector::parse("metadata.namespace==ns,status.phase!=Failed")
                .unwrap()
                .matches(&o)
        );
        assert!(!FieldSelector::parse("metadata.name=y").unwrap().matches(&o));
    }
}
