//! What differs per kind on the write path: defaulting (before admission) and the
//! validation dispatch (rules in [`crate::validate`]).
use super::State;
use crate::errors::FieldError;
use crate::meta::meta_str;
use crate::resources::ResDef;
use crate::validate;
use serde_json::{Value, json};

impl State {
    pub(super) fn default_obj(&mut self, res: &ResDef, obj: &mut Value) {
        match res.resource {
            "pods" => {
                if let Some(spec) = obj.get_mut("spec") {
                    validate::default_pod_spec(spec);
                }
            }
            "replicasets" => {
                if obj.pointer("/spec/replicas").is_none()
                    && obj.get("spec").is_some_and(Value::is_object)
                {
                    obj["spec"]["replicas"] = json!(1);
                }
                if let Some(spec) = obj.pointer_mut("/spec/template/spec") {
                    validate::default_pod_spec(spec);
                }
            }
            "services" => {
                if !obj.get("spec").is_some_and(Value::is_object) {
                    obj["spec"] = json!({});
                }
                let spec = obj["spec"].as_object_mut().unwrap();
                spec.entry("type").or_insert(json!("ClusterIP"));
                spec.entry("sessionAffinity").or_insert(json!("None"));
                for p in spec
                    .get_mut("ports")
                    .and_then(Value::as_array_mut)
                    .into_iter()
                    .flatten()
                {
                    if let Some(p) = p.as_object_mut() {
                        p.entry("protocol").or_insert(json!("TCP"));
                        if let Some(port) = p.get("port").cloned() {
                            p.entry("targetPort").or_insert(port);
                        }
                    }
                }
            }
            _ => {}
        }
    }

    pub(super) fn validate(&self, res: &ResDef, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let name = meta_str(obj, "name");
        let style = match res.resource {
            "namespaces" => "label",
            "services" => "dns1035",
            _ => "subdomain",
        };
        validate::name(name, style, &mut errs);
        validate::labels(
            obj.pointer("/metadata/labels").and_then(Value::as_object),
            "metadata.labels",
            &mut errs,
        );
        match res.resource {
            "pods" => match obj.get("spec") {
                Some(spec) => validate::pod_spec(spec, "spec", &mut errs),
                None => errs.push(FieldError::required("spec.containers", "")),
            },
            "replicasets" => validate::replicaset(obj, &mut errs),
            _ => {}
        }
        errs
    }
}
