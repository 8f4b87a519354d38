//! HTTP serving: routing, authentication, RBAC, faults and the request log.

use crate::cluster::Cluster;
use crate::errors::{ApiError, for_code};
use crate::faults::FaultAction;
use crate::meta::meta_str;
use crate::rbac::{self, Attrs};
use crate::request::Ctx;
use crate::request_log::RequestRecord;
use crate::resources::{self, ResDef};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::DeleteOpts;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::watch;

/// Accepts connections until shutdown.
pub async fn serve(
    listener: tokio::net::TcpListener,
    inner: Arc<Cluster>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let stream = tokio::select! {
            acc = listener.accept() => match acc {
                Ok((s, _)) => s,
                Err(_) => continue,
            },
            _ = shutdown.changed() => return,
        };
        let _ = stream.set_nodelay(true);
        let inner = inner.clone();
        let mut sd = shutdown.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| handle(inner.clone(), req));
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc);
            tokio::select! {
                _ = conn => {}
                _ = sd.changed() => {}
            }
        });
    }
}

/// The error that makes hyper close the connection without answering.
#[derive(Debug)]
struct DropConnection;

impl std::fmt::Display for DropConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection dropped by injected fault")
    }
}

impl std::error::Error for DropConnection {}

type Resp = Response<Full<Bytes>>;

fn json_response(code: u16, body: &Value, warnings: &[String], retry_after: Option<u64>) -> Resp {
    let mut b = Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("content-type", "application/json")
        .header("cache-control", "no-cache, private");
    for w in warnings {
        b = b.header(
            "warning",
            format!("299 - {}", serde_json::to_string(w).unwrap_or_default()),
        );
    }
    if let Some(ra) = retry_after {
        b = b.header("retry-after", ra.to_string());
    }
    b.body(Full::new(Bytes::from(
        serde_json::to_vec(body).unwrap_or_default(),
    )))
    .unwrap()
}

/// The 429 of API Priority and Fairness / max-inflight: Go's `http.Error` with
/// `Too many requests, please try again later.` and a `Retry-After` header, not a `Status`.
fn too_many_requests(retry_after: u64) -> Resp {
    Response::builder()
        .status(StatusCode::TOO_MANY_REQUESTS)
        .header("content-type", "text/plain; charset=utf-8")
        .header("x-content-type-options", "nosniff")
        .header("retry-after", retry_after.to_string())
        .body(Full::new(Bytes::from_static(
            b"Too many requests, please try again later.\n",
        )))
        .unwrap()
}

fn error_response(e: &ApiError) -> Resp {
    json_response(e.code, &e.to_status(), &[], e.retry_after)
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16)
                {
                    Ok(v) => {
                        out.push(v);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_query(q: &str) -> BTreeMap<String, String> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

async fn handle(inner: Arc<Cluster>, req: Request<Incoming>) -> Result<Resp, DropConnection> {
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let user = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(|t| t.trim().to_string())
        .or_else(|| {
            // kubectl (client-go) sends no bearer token over plain HTTP, but it does send the
            // impersonation header the kubeconfig's `as` asks for.
            req.headers()
                .get("impersonate-user")
                .and_then(|v| v.to_str().ok())
                .map(String::from)
        })
        .unwrap_or_else(|| "system:anonymous".to_string());
    let content_type = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_string();
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return Err(DropConnection),
    };
    let mut record = RequestRecord {
        method: method.clone(),
        path: path.clone(),
        query: query.clone(),
        status: 0,
        user: user.clone(),
    };
    let mut after: Option<u16> = None;
    match inner.take_fault(&method, &path) {
        Some(FaultAction::Status { code, message }) => {
            let mut e = for_code(code);
            if let Some(message) = message {
                e.message = message;
            }
            record.status = code;
            inner.record(record);
            return Ok(error_response(&e));
        }
        Some(FaultAction::TooManyRequests { retry_after }) => {
            record.status = 429;
            inner.record(record);
            return Ok(too_many_requests(retry_after));
        }
        Some(FaultAction::StatusAfter { code }) => after = Some(code),
        Some(FaultAction::Stall(d)) => tokio::time::sleep(d).await,
        Some(FaultAction::Hang) => std::future::pending::<()>().await,
        Some(FaultAction::Drop) => {
            inner.record(record);
            return Err(DropConnection);
        }
        None => {}
    }
    let q = parse_query(&query);
    let mut ctx = Ctx::user(&user);
    ctx.dry_run = q.get("dryRun").is_some_and(|d| d == "All");
    let resp = match route(&inner, &method, &path, &q, &content_type, &body, &mut ctx) {
        Ok((code, v)) => json_response(code, &v, &ctx.warnings, None),
        Err(e) => error_response(&e),
    };
    if method != "GET" {
        inner.notify.notify_one();
    }
    let resp = match after {
        Some(code) => error_response(&for_code(code)),
        None => resp,
    };
    record.status = resp.status().as_u16();
    inner.record(record);
    Ok(resp)
}

struct Target {
    res: &'static ResDef,
    ns: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

fn not_found_path() -> ApiError {
    ApiError::new(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
}

fn parse_target(path: &str) -> Result<Result<Target, Value>, ApiError> {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, rest) = match segs.as_slice() {
        ["api"] => return Ok(Err(resources::api_versions("127.0.0.1"))),
        ["apis"] => return Ok(Err(resources::group_list())),
        ["version"] => return Ok(Err(resources::version())),
        ["api", "v1"] => {
            return resources::resource_list("")
                .map(|v| Ok(Err(v)))
                .unwrap_or(Err(not_found_path()));
        }
        ["apis", g] => {
            return resources::group(g)
                .map(|v| Ok(Err(v)))
                .unwrap_or(Err(not_found_path()));
        }
        ["apis", g, "v1"] => {
            return resources::resource_list(g)
                .map(|v| Ok(Err(v)))
                .unwrap_or(Err(not_found_path()));
        }
        ["api", "v1", rest @ ..] => ("", rest),
        ["apis", g, "v1", rest @ ..] => (*g, rest),
        _ => return Err(not_found_path()),
    };
    let (ns, rest) = match rest {
        ["namespaces", ns, r, tail @ ..]
            if resources::find(group, r).is_some_and(|d| d.namespaced) =>
        {
            (Some(ns.to_string()), [&[*r][..], tail].concat())
        }
        _ => (None, rest.to_vec()),
    };
    let res = rest
        .first()
        .and_then(|r| resources::find(group, r))
        .ok_or_else(not_found_path)?;
    if rest.len() > 3 || (res.namespaced && ns.is_none() && rest.len() > 1) {
        return Err(not_found_path());
    }
    Ok(Ok(Target {
        res,
        ns,
        name: rest.get(1).map(|s| s.to_string()),
        sub: rest.get(2).map(|s| s.to_string()),
    }))
}

fn route(
    inner: &Cluster,
    method: &str,
    path: &str,
    q: &BTreeMap<String, String>,
    content_type: &str,
    body: &Bytes,
    ctx: &mut Ctx,
) -> Result<(u16, Value), ApiError> {
    match path {
        "/healthz" | "/livez" | "/readyz" => return Ok((200, json!("ok"))),
        _ => {}
    }
    let t = match parse_target(path)? {
        Ok(t) => t,
        Err(doc) => {
            let mut doc = doc;
            if path == "/api" {
                doc["serverAddressByClientCIDRs"][0]["serverAddress"] =
                    json!(inner.url.trim_start_matches("http://"));
            }
            return Ok((200, doc));
        }
    };
    let watch = q.get("watch").is_some_and(|w| w == "1" || w == "true");
    let verb = match (method, t.name.is_some()) {
        ("GET", _) if watch => "watch",
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", false) => "create",
        ("PUT", true) => "update",
        ("PATCH", true) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => return Err(for_code(405)),
    };
    let full_resource = match &t.sub {
        Some(s) => format!("{}/{}", t.res.resource, s),
        None => t.res.resource.to_string(),
    };
    // For cluster-scoped objects the name is the namespace being asked about.
    let mut st = inner.state();
    if inner.rbac && ctx.user != inner.admin_user {
        let attrs = Attrs {
            user: &ctx.user,
            verb,
            group: t.res.group,
            resource: &full_resource,
            namespace: t.ns.as_deref(),
            name: t.name.as_deref(),
        };
        if !rbac::allowed(&st, &attrs) {
            let mut e = ApiError::new(
                403,
                "Forbidden",
                rbac::forbidden_message(&attrs, &t.res.qualified()),
            );
            let mut d = json!({"kind": t.res.resource});
            if let Some(n) = &t.name {
                d["name"] = json!(n);
            }
            if !t.res.group.is_empty() {
                d["group"] = json!(t.res.group);
            }
            e.details = Some(d);
            return Err(e);
        }
    }
    if watch {
        return Err(ApiError::new(
            405,
            "MethodNotAllowed",
            "watch is not supported by the jumppod simulator",
        ));
    }
    let ns = t.ns.as_deref();
    let parse_body = || -> Result<Value, ApiError> {
        if content_type.contains("protobuf") || content_type.contains("cbor") {
            return Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (got {content_type})"
                ),
            ));
        }
        if body.is_empty() {
            return Ok(json!({}));
        }
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding request body: {e}")))
    };
    match verb {
        "get" => {
            let name = t.name.as_deref().unwrap();
            let key_ns = if t.res.namespaced { ns } else { None };
            let obj = st
                .get(t.res.resource, key_ns, name)
                .ok_or_else(|| ApiError::not_found(t.res, name))?;
            match t.sub.as_deref() {
                None | Some("status") => Ok((200, obj.clone())),
                Some(_) => Err(not_found_path()),
            }
        }
        "list" => Ok((200, list(&st, t.res, ns, q)?)),
        "create" => {
            if t.sub.is_some() {
                return Err(for_code(405));
            }
            let obj = st.create(t.res, ns, parse_body()?, ctx)?;
            Ok((201, obj))
        }
        "update" => {
            let obj = st.update(
                t.res,
                ns,
                t.name.as_deref().unwrap(),
                t.sub.as_deref(),
                parse_body()?,
                true,
                ctx,
            )?;
            Ok((200, obj))
        }
        "patch" => {
            let name = t.name.as_deref().unwrap();
            let existed = st
                .get(
                    t.res.resource,
                    if t.res.namespaced { ns } else { None },
                    name,
                )
                .is_some();
            let obj = st.patch(t.res, ns, name, t.sub.as_deref(), content_type, body, ctx)?;
            Ok((if existed { 200 } else { 201 }, obj))
        }
        "delete" => {
            let opts = DeleteOpts::parse(&parse_body()?, q);
            let obj = st.delete(t.res, ns, t.name.as_deref().unwrap(), &opts, ctx)?;
            Ok((200, obj))
        }
        _ => {
            let opts = DeleteOpts::parse(&parse_body()?, q);
            let mut items = list(&st, t.res, ns, q)?;
            let mut deleted = Vec::new();
            for o in items["items"].as_array().cloned().unwrap_or_default() {
                let name = meta_str(&o, "name").to_string();
                let ons = meta_str(&o, "namespace").to_string();
                let ons = (!ons.is_empty()).then_some(ons);
                if let Ok(d) = st.delete(t.res, ons.as_deref(), &name, &opts, ctx) {
                    deleted.push(d);
                }
            }
            items["items"] = Value::Array(deleted);
            Ok((200, items))
        }
    }
}

fn list(
    st: &crate::store::State,
    res: &ResDef,
    ns: Option<&str>,
    q: &BTreeMap<String, String>,
) -> Result<Value, ApiError> {
    let ls = LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))
        .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
    let fs = FieldSelector::parse(q.get("fieldSelector").map(String::as_str).unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    let items: Vec<Value> = st
        .iter(res.resource, if res.namespaced { ns } else { None })
        .filter(|o| {
            ls.matches(o.pointer("/metadata/labels").and_then(Value::as_object)) && fs.matches(o)
        })
        .cloned()
        .collect();
    Ok(json!({
        "kind": format!("{}List", res.kind), "apiVersion": res.api_version(),
        "metadata": {"resourceVersion": st.rv.to_string()}, "items": items,
    }))
}
