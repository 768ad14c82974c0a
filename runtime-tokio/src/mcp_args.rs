//! A tool call's arguments checked against the tool's own input schema, before they
//! become a control request: a wrong argument is answered with its name and what it must
//! be ("`to` must be an address string or a list of address strings, not 5"), never with
//! the words of the JSON decoder ("untagged enum Recipients").
//!
//! One mechanism for every tool: the schema a host is shown (`tools/list`) is the one the
//! call is checked against. It understands the part of JSON Schema the bridge's schemas
//! use — `type` (`string`, `integer`, `boolean`, `object`, `array`), `enum`, `anyOf`,
//! `items`, `minItems`, `minimum`, `properties`, `required`, `additionalProperties: false`
//! — and a `title` on a string (`"address"`) that names what the string holds.

use serde_json::{Map, Value};

/// Checks `args` (a call's `arguments`, absent = `{}`) against the tool `tool`'s input
/// `schema`; the first problem, in words a person and a host can act on.
pub fn check(tool: &str, schema: &Value, args: &Map<String, Value>) -> Result<(), String> {
    let properties = schema.get("properties").and_then(Value::as_object);
    let names = || -> String {
        match properties {
            Some(p) if !p.is_empty() => {
                let list: Vec<String> = p.keys().map(|k| format!("`{k}`")).collect();
                format!("it takes {}", list.join(", "))
            }
            _ => "it takes no arguments".into(),
        }
    };
    if schema.get("additionalProperties") == Some(&Value::Bool(false)) {
        // The names in order of the call, so the first unknown one is the one named.
        if let Some(k) = args
            .keys()
            .find(|k| properties.is_none_or(|p| !p.contains_key(*k)))
        {
            return Err(format!(
                "`{tool}` has no argument `{}`: {}",
                shown_name(k),
                names()
            ));
        }
    }
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for name in required.iter().filter_map(Value::as_str) {
            if !args.contains_key(name) {
                let what = properties
                    .and_then(|p| p.get(name))
                    .map(expected)
                    .unwrap_or_else(|| "given".into());
                return Err(format!("`{tool}` needs `{name}`: {what}"));
            }
        }
    }
    if let Some(p) = properties {
        for (name, sub) in p {
            if let Some(v) = args.get(name) {
                if !matches(v, sub) {
                    return Err(format!(
                        "`{name}` must be {}, not {}",
                        expected(sub),
                        shown(v)
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Whether `v` is what `schema` describes.
fn matches(v: &Value, schema: &Value) -> bool {
    if let Some(any) = schema.get("anyOf").and_then(Value::as_array) {
        if !any.iter().any(|s| matches(v, s)) {
            return false;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
        if !allowed.contains(v) {
            return false;
        }
    }
    let minimum = schema.get("minimum").and_then(Value::as_i64);
    match schema.get("type").and_then(Value::as_str) {
        None => true,
        Some("string") => v.is_string(),
        Some("boolean") => v.is_boolean(),
        Some("object") => v.is_object(),
        Some("integer") => match (v.as_i64(), v.as_u64()) {
            (Some(n), _) => minimum.is_none_or(|m| n >= m),
            (None, Some(_)) => true,
            _ => false,
        },
        Some("array") => {
            let Some(items) = v.as_array() else {
                return false;
            };
            let min = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0);
            items.len() as u64 >= min
                && schema
                    .get("items")
                    .is_none_or(|s| items.iter().all(|i| matches(i, s)))
        }
        Some(_) => true,
    }
}

/// What `schema` asks for, as a phrase ("an address string or a list of address strings").
fn expected(schema: &Value) -> String {
    if let Some(any) = schema.get("anyOf").and_then(Value::as_array) {
        return any.iter().map(expected).collect::<Vec<_>>().join(" or ");
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
        let words: Vec<String> = allowed
            .iter()
            .map(|a| a.as_str().map_or_else(|| a.to_string(), str::to_string))
            .collect();
        return format!("one of {}", words.join(", "));
    }
    let title = schema.get("title").and_then(Value::as_str);
    match schema.get("type").and_then(Value::as_str) {
        Some("string") => match title {
            Some(t) => format!("{} {t} string", article(t)),
            None => "a string".into(),
        },
        Some("boolean") => "true or false".into(),
        Some("integer") => match schema.get("minimum").and_then(Value::as_i64) {
            Some(0) => "a whole number (0 or more)".into(),
            Some(m) => format!("a whole number ({m} or more)"),
            None => "a whole number".into(),
        },
        Some("object") => "an object (JSON `{…}`)".into(),
        Some("array") => {
            let item = schema.get("items").map(expected).unwrap_or_default();
            let item = item
                .strip_prefix("an ")
                .or_else(|| item.strip_prefix("a "))
                .unwrap_or(&item);
            let at_least = match schema.get("minItems").and_then(Value::as_u64) {
                Some(n) if n > 1 => format!(" (at least {n})"),
                _ => String::new(),
            };
            if item.is_empty() {
                format!("a list{at_least}")
            } else {
                format!("a list of {item}s{at_least}")
            }
        }
        _ => "given".into(),
    }
}

fn article(word: &str) -> &'static str {
    if word.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    }
}

/// A value as the error quotes it: short, on one line, peer-safe.
fn shown(v: &Value) -> String {
    let text = match v {
        Value::Null => "null".to_string(),
        Value::Object(_) => "an object".to_string(),
        Value::Array(a) if a.is_empty() => "an empty list".to_string(),
        v => v.to_string(),
    };
    a2acp_core::display::line(&text, 60).into_owned()
}

/// A name the host sent, as the error quotes it.
fn shown_name(k: &str) -> String {
    a2acp_core::display::line(k, 64).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn every_tool_argument_of_the_wrong_type_is_named_with_what_it_must_be() {
        for tool in crate::mcp::tool_schemas() {
            let (name, schema) = tool;
            let Some(props) = schema.get("properties").and_then(Value::as_object) else {
                continue;
            };
            for (arg, sub) in props {
                // A value of a type no argument of the bridge takes.
                let wrong =
                    if sub.get("type") == Some(&json!("string")) || sub.get("anyOf").is_some() {
                        json!(5)
                    } else {
                        json!("five")
                    };
                let mut a = Map::new();
                a.insert(arg.clone(), wrong.clone());
                // Required siblings absent are named first; give them what they take.
                let e = check(name, &schema, &a).unwrap_err();
                assert!(
                    e.contains(&format!("`{arg}` must be")) || e.contains("needs `"),
                    "{name}.{arg}: {e}"
                );
                assert!(!e.contains("enum") && !e.contains("invalid type"), "{e}");
            }
        }
    }

    #[test]
    fn the_messages_name_the_argument_and_its_type() {
        let start = crate::mcp::tool_schema("start_thread").unwrap();
        let base = json!({"category": "scheduling", "summary": "dinner"});
        let mut a = args(base.clone());
        a.insert("to".into(), json!(5));
        assert_eq!(
            check("start_thread", &start, &a).unwrap_err(),
            "`to` must be an address string or a list of address strings, not 5"
        );
        a.insert("to".into(), json!(["agent:bob@example.org", 7]));
        assert!(check("start_thread", &start, &a)
            .unwrap_err()
            .starts_with("`to` must be"));
        a.insert("to".into(), json!([]));
        assert!(check("start_thread", &start, &a)
            .unwrap_err()
            .ends_with("not an empty list"));
        a.insert("to".into(), json!("agent:bob@example.org"));
        assert_eq!(check("start_thread", &start, &a), Ok(()));
        a.insert("quorum".into(), json!(0));
        assert_eq!(
            check("start_thread", &start, &a).unwrap_err(),
            "`quorum` must be a whole number (1 or more), not 0"
        );
        a.remove("quorum");
        a.insert("urgent".into(), json!("yes"));
        assert_eq!(
            check("start_thread", &start, &a).unwrap_err(),
            "`urgent` must be true or false, not \"yes\""
        );
        let e = check(
            "start_thread",
            &start,
            &args(json!({"to": "agent:b@x.org"})),
        )
        .unwrap_err();
        assert_eq!(e, "`start_thread` needs `category`: a string");
        let perm = crate::mcp::tool_schema("set_permission").unwrap();
        let e = check(
            "set_permission",
            &perm,
            &args(json!({"field": "dietary", "tier": "sometimes"})),
        )
        .unwrap_err();
        assert_eq!(
            e,
            "`tier` must be one of always_share, ask_first, never_share, not \"sometimes\""
        );
        let status = crate::mcp::tool_schema("status").unwrap();
        let e = check("status", &status, &args(json!({"verbose": true}))).unwrap_err();
        assert_eq!(
            e,
            "`status` has no argument `verbose`: it takes no arguments"
        );
        let thread = crate::mcp::tool_schema("thread").unwrap();
        let e = check("thread", &thread, &args(json!({"id": "thr_1", "full": 1}))).unwrap_err();
        assert_eq!(e, "`thread` has no argument `full`: it takes `id`");
        let answer = crate::mcp::tool_schema("answer").unwrap();
        let e = check("answer", &answer, &args(json!({"prompt_id": -1}))).unwrap_err();
        assert_eq!(e, "`prompt_id` must be a whole number (0 or more), not -1");
        let e = check(
            "answer",
            &answer,
            &args(json!({"prompt_id": 1, "args": "confirm"})),
        )
        .unwrap_err();
        assert_eq!(e, "`args` must be a list of strings, not \"confirm\"");
        let reply = crate::mcp::tool_schema("reply_thread").unwrap();
        let e = check(
            "reply_thread",
            &reply,
            &args(json!({"id": "thr_1", "context": "at 8"})),
        )
        .unwrap_err();
        assert_eq!(e, "`context` must be an object (JSON `{…}`), not \"at 8\"");
    }
}
