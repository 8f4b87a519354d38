//! Whether RBAC lets the controller list what a watch of its needs, asked once at start.

use kube::Api;

/// Whether the controller may list what `api` reaches, which its watch needs; `forbidden` says
/// what goes undone without it, logged once when RBAC refuses. Another failure is the API's,
/// not RBAC's: the watch retries it.
pub(super) async fn may_list<K>(api: Api<K>, what: &str, forbidden: &str) -> bool
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api
        .list_metadata(&kube::api::ListParams::default().limit(1))
        .await
    {
        Ok(_) => true,
        Err(kube::Error::Api(status)) if status.code == 403 => {
            tracing::warn!("cannot list {what} (forbidden): {forbidden}");
            false
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot list {what} yet; watching them all the same");
            true
        }
    }
}
