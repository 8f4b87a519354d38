//! JSON as the API server writes it, near enough for the splice: compact, a struct's fields in
//! their declared order (here each object's keys in reverse, so never sorted as serde_json's
//! `Value` writes them), and `<`, `>`, `&` escaped as Go's encoder escapes them. Shared by the
//! policy's fixture tests and the properties in `tests/`.

use serde_json::Value;

pub fn written(value: &Value) -> String {
    fn write(value: &Value, out: &mut String) {
        match value {
            Value::Object(map) => {
                out.push('{');
                for (at, (key, value)) in map.iter().rev().enumerate() {
                    if at > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::from(key.as_str()).to_string());
                    out.push(':');
                    write(value, out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (at, item) in items.iter().enumerate() {
                    if at > 0 {
                        out.push(',');
                    }
                    write(item, out);
                }
                out.push(']');
            }
            scalar => out.push_str(&scalar.to_string()),
        }
    }
    let mut out = String::new();
    write(value, &mut out);
    // Outside strings compact JSON has none of the three.
    out.replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}
