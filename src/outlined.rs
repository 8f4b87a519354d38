//! A deserializer that parses each struct in a function of its own, for the typed parse of
//! k8s-openapi objects.
//!
//! serde's derived `visit_map` calls one `next_value::<FieldType>()` per field, and a struct's
//! parse is called from few places, so LLVM inlined whole trees of them: in the policy module
//! `Volume`'s `visit_map` was one function of 110 KB of Wasm (its 30 volume sources inside) and
//! `PodSpec`'s one of 68 KB. Cranelift's backtracking register allocator, which policy-server
//! compiles with, needs memory that grows faster than a function's size: those two functions
//! set the peak of compiling the module (476 MiB of RSS; 61 MiB with both emptied). Wrapped in
//! [`Outlined`], every struct's `deserialize_struct` is a function that is never inlined, so
//! no struct's parse contains another's (the largest left: `Volume`'s, 27 KB; the peak 68 MiB),
//! and a struct used in several places is parsed by one copy (the module 65 KB smaller). The parse itself,
//! its errors and the path `serde_path_to_error` reports are unchanged: every method forwards.

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor,
};
use std::fmt;

/// Wraps a deserializer, a visitor, a seed or an access: the same parse, each struct parsed
/// out of line.
pub(crate) struct Outlined<T>(pub(crate) T);

macro_rules! forward_deserialize {
    ($($method:ident),* $(,)?) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
            self.0.$method(Outlined(visitor))
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Outlined<D> {
    type Error = D::Error;

    forward_deserialize!(
        deserialize_any,
        deserialize_bool,
        deserialize_i8,
        deserialize_i16,
        deserialize_i32,
        deserialize_i64,
        deserialize_i128,
        deserialize_u8,
        deserialize_u16,
        deserialize_u32,
        deserialize_u64,
        deserialize_u128,
        deserialize_f32,
        deserialize_f64,
        deserialize_char,
        deserialize_str,
        deserialize_string,
        deserialize_bytes,
        deserialize_byte_buf,
        deserialize_option,
        deserialize_unit,
        deserialize_seq,
        deserialize_map,
        deserialize_identifier,
        deserialize_ignored_any,
    );

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_unit_struct(name, Outlined(visitor))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_newtype_struct(name, Outlined(visitor))
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_tuple(len, Outlined(visitor))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0
            .deserialize_tuple_struct(name, len, Outlined(visitor))
    }

    // The boundary: one function per struct type, holding its `visit_map`.
    #[inline(never)]
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_struct(name, fields, Outlined(visitor))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_enum(name, variants, Outlined(visitor))
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

macro_rules! forward_visit {
    ($($method:ident($ty:ty)),* $(,)?) => {$(
        fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
            self.0.$method(v)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Outlined<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.0.expecting(f)
    }

    forward_visit!(
        visit_bool(bool),
        visit_i8(i8),
        visit_i16(i16),
        visit_i32(i32),
        visit_i64(i64),
        visit_i128(i128),
        visit_u8(u8),
        visit_u16(u16),
        visit_u32(u32),
        visit_u64(u64),
        visit_u128(u128),
        visit_f32(f32),
        visit_f64(f64),
        visit_char(char),
        visit_str(&str),
        visit_borrowed_str(&'de str),
        visit_string(String),
        visit_bytes(&[u8]),
        visit_borrowed_bytes(&'de [u8]),
        visit_byte_buf(Vec<u8>),
    );

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.0.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.0.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<V::Value, D::Error> {
        self.0.visit_some(Outlined(deserializer))
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<V::Value, D::Error> {
        self.0.visit_newtype_struct(Outlined(deserializer))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.0.visit_seq(Outlined(seq))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.0.visit_map(Outlined(map))
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.0.visit_enum(Outlined(data))
    }
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Outlined<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(Outlined(deserializer))
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Outlined<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.0.next_key_seed(Outlined(seed))
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        self.0.next_value_seed(Outlined(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Outlined<A> {
    type Error = A::Error;

    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, A::Error> {
        self.0.next_element_seed(Outlined(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

impl<'de, A: EnumAccess<'de>> EnumAccess<'de> for Outlined<A> {
    type Error = A::Error;
    type Variant = Outlined<A::Variant>;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Self::Variant), A::Error> {
        self.0
            .variant_seed(Outlined(seed))
            .map(|(value, variant)| (value, Outlined(variant)))
    }
}

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for Outlined<A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.0.unit_variant()
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<S::Value, A::Error> {
        self.0.newtype_variant_seed(Outlined(seed))
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        self.0.tuple_variant(len, Outlined(visitor))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        self.0.struct_variant(fields, Outlined(visitor))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::ReplicaSet;
    use k8s_openapi::api::core::v1::Pod;
    use rstest::rstest;
    use serde::de::DeserializeOwned;
    use serde_json::{Value, json};
    use std::fmt::Debug;

    /// The typed parse with and without the wrapper: the value, or the path and the message.
    fn both<T: DeserializeOwned + PartialEq + Debug>(value: &Value) -> Result<T, String> {
        let read = |result: Result<T, serde_path_to_error::Error<serde_json::Error>>| {
            result.map_err(|e| format!("{}: {}", e.path(), e.inner()))
        };
        let plain = read(serde_path_to_error::deserialize(value));
        let outlined = read(serde_path_to_error::deserialize(Outlined(value)));
        assert_eq!(outlined, plain);
        outlined
    }

    fn pod(spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec})
    }

    #[rstest]
    #[case::a_pod_with_volumes_probes_and_resources(pod(json!({
        "containers": [{"name": "c", "image": "i",
            "resources": {"requests": {"cpu": "1"}, "limits": {"memory": "1Gi"}},
            "livenessProbe": {"httpGet": {"port": "http"}}, "ports": [{"containerPort": 22}]}],
        "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "1Gi"}},
                    {"name": "s", "secret": {"secretName": "k", "defaultMode": 256}}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "In"}]}]}}}})),
        None)]
    #[case::a_wrong_type_deep_in_a_volume(pod(json!({"containers": [],
        "volumes": [{"name": "s", "secret": {"defaultMode": "rw"}}]})),
        Some("spec.volumes[0].secret.defaultMode: invalid type: string \"rw\", expected i32"))]
    #[case::containers_as_a_string(pod(json!({"containers": "c"})),
        Some("spec.containers: invalid type: string \"c\", expected a sequence"))]
    #[case::resources_as_a_list(pod(json!({"containers": [{"name": "c", "resources": []}]})),
        Some("spec.containers[0].resources: invalid type: sequence, expected ResourceRequirements"))]
    #[case::a_probe_port_neither_number_nor_name(pod(json!({"containers": [{"name": "c",
        "livenessProbe": {"httpGet": {"port": true}}}]})),
        Some("spec.containers[0].livenessProbe.httpGet.port: invalid type: boolean `true`, expected IntOrString"))]
    #[case::a_port_as_a_string(pod(json!({"containers": [{"name": "c",
        "ports": [{"containerPort": "22"}]}]})),
        Some("spec.containers[0].ports[0].containerPort: invalid type: string \"22\", expected i32"))]
    fn a_pod_reads_the_same_outlined(#[case] value: Value, #[case] error: Option<&str>) {
        let read = both::<Pod>(&value);
        assert_eq!(read.as_ref().err().map(String::as_str), error, "{read:?}");
    }

    #[test]
    fn a_replica_set_reads_the_same_outlined() {
        let text = include_str!("../policy/test_data/replicaset_conforming_create.json");
        let request: Value = serde_json::from_str(text).expect("JSON");
        let replica_set = both::<ReplicaSet>(&request["object"]).expect("a ReplicaSet");
        assert!(replica_set.spec.and_then(|s| s.template).is_some());
    }
}
