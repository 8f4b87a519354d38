//! `jumppod run` keeps a released dstack server's bare jump pod, on the real control plane
//! (API server, scheduler, node-lifecycle controller; the fake kubelet runs the pods): made again
//! under its name whatever ends it, behind the same Service and NodePort, with a standby while it
//! does not serve; and the keys of the project's live jobs kept in the users' keys Secret. The
//! controller runs as a user of its own with exactly the rules `jumppod rbac --controller`
//! prints. The same on real nodes, driven by dstack's own code: `dstack.rs`.

use jumppod::schema;
use jumppod_host::api::Kube;
use jumppod_plan::keeper::{RECREATED_ANNOTATION, STANDBY_ANNOTATION};
use jumppod_plan::objects::{annotation, is_active, is_ready};
use jumppod_plan::refresh::DIGEST_ANNOTATION;
use jumppod_testkit::cluster::{
    UserKind, admin, cluster_dir, events, evict, fresh_user, grant_controller, kubeconfig_of,
    namespace, played_node, remove_played_nodes, typed, wait_for, wait_for_up_to,
};
use jumppod_testkit::proxy::SlowFront;
use jumppod_testkit::run::{Controller, SMALL};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Secret, Service};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const RUST_LOG: &str = "info,jumppod_host::controller=debug";
const PROJECT: &str = "main";
const POOL: &str = "jumppod.test/pool";

/// A test's namespace, two nodes of its own that only its pods tolerate, its controller, and
/// dstack's objects: the Service and the bare jump pod as dstack 0.22.5 makes them.
struct Project {
    kube: Kube,
    ns: &'static str,
    name: String,
    controller: Controller,
}

impl Project {
    async fn start(ns: &'static str) -> Project {
        Project::start_as(ns, &fresh_user(UserKind::Plain), None).await
    }

    /// [`Project::start`], the controller running as `user`, and reaching the API server
    /// through `front` if given.
    async fn start_as(ns: &'static str, user: &str, front: Option<&SlowFront>) -> Project {
        let kube = admin().await;
        namespace(&kube, ns).await;
        for n in ["a", "b"] {
            let node = jumppod_sim::NodeSpec::new(&format!("{ns}-{n}"))
                .label(POOL, ns)
                .taint(POOL, ns, "NoSchedule");
            played_node(&kube, ns, node.to_json()).await;
        }
        grant_controller(&kube, ns, user).await;
        let template = cluster_dir().join(format!("keeper-{ns}.yaml"));
        std::fs::write(&template, SMALL).unwrap();
        let kubeconfig = match front {
            Some(front) => {
                let path = cluster_dir().join(format!("keeper-{ns}-front.kubeconfig"));
                front.write_kubeconfig(&path);
                path
            }
            None => kubeconfig_of(user),
        };
        let controller = Controller::watching(
            &kubeconfig,
            ns,
            &template,
            RUST_LOG,
            &cluster_dir().join(format!("keeper-{ns}.log")),
        );
        controller.leading().await;
        Project {
            kube,
            ns,
            name: schema::jump_pod_name(PROJECT),
            controller,
        }
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.kube.client.clone(), self.ns)
    }

    fn placement(&self) -> Value {
        json!({
            "nodeSelector": {POOL: self.ns},
            "tolerations": [{"key": POOL, "operator": "Equal", "value": self.ns, "effect": "NoSchedule"}],
        })
    }

    /// What `_create_jump_pod_service_if_not_exists` creates: the bare pod (dstack's labels,
    /// its container and command) and the NodePort Service selecting its instance label.
    async fn dstack_made(&self) -> (Pod, Service) {
        self.dstack_made_with(None).await
    }

    /// [`Project::dstack_made`], the pod with `volume` too (what the policy's kit adds).
    async fn dstack_made_with(&self, volume: Option<Value>) -> (Pod, Service) {
        let labels = schema::current_labels(&self.name, PROJECT);
        let mut spec = json!({"containers": [{
            "name": schema::container_name(&self.name),
            "image": "testcontainers/sshd:1.3.0",
            "command": ["/bin/sh"],
            "args": ["-c", "mkdir -p ~/.ssh && chmod 700 ~/.ssh && /usr/sbin/sshd -D -e -p 22"],
            "ports": [{"containerPort": 22}],
        }]});
        spec.as_object_mut()
            .unwrap()
            .extend(self.placement().as_object().unwrap().clone());
        if let Some(volume) = volume {
            spec["volumes"] = json!([volume]);
        }
        let pod: Pod =
            typed(json!({"metadata": {"name": self.name, "labels": labels}, "spec": spec}));
        self.pods()
            .create(&PostParams::default(), &pod)
            .await
            .unwrap();
        let svc: Service = typed(json!({
            "metadata": {"name": schema::service_name(&self.name), "labels": labels},
            "spec": {"type": "NodePort", "selector": schema::current_selector(&self.name),
                     "ports": [{"port": 22, "targetPort": 22}]},
        }));
        let svc = Api::<Service>::namespaced(self.kube.client.clone(), self.ns)
            .create(&PostParams::default(), &svc)
            .await
            .unwrap();
        (self.ready_named(None).await, svc)
    }

    /// The pod named like the jump pod, Ready, and another than `not` (a uid).
    async fn ready_named(&self, not: Option<&str>) -> Pod {
        wait_for("the jump pod Ready under its name", || async {
            let pod = self.pods().get(&self.name).await.ok()?;
            (is_ready(&pod) && pod.metadata.uid.as_deref() != not).then_some(pod)
        })
        .await
    }

    /// Waits until the jump pod carries the digest of the users' keys Secret as it is: its
    /// kubelet was told to remount it.
    async fn told_of_keys(&self, what: &str) {
        let secrets: Api<Secret> = Api::namespaced(self.kube.client.clone(), self.ns);
        let secret_name = jumppod_plan::manifest::keys_secret_name(&self.name);
        wait_for(what, || async {
            let secret = secrets.get(&secret_name).await.ok()?;
            let pod = self.pods().get(&self.name).await.ok()?;
            let wanted = jumppod_plan::refresh::digest(&secret);
            (annotation(&pod.metadata, DIGEST_ANNOTATION) == Some(wanted.as_str())).then_some(())
        })
        .await
    }

    async fn standbys(&self) -> Vec<Pod> {
        let list = self.pods().list(&Default::default()).await.unwrap();
        list.items
            .into_iter()
            .filter(|p| annotation(&p.metadata, STANDBY_ANNOTATION).is_some())
            .collect()
    }

    async fn service(&self) -> Service {
        Api::<Service>::namespaced(self.kube.client.clone(), self.ns)
            .get(&schema::service_name(&self.name))
            .await
            .unwrap()
    }

    /// The Events the controller published with `reason`.
    async fn events(&self, reason: &str) -> Vec<Event> {
        events(&self.kube, self.ns, reason).await
    }

    /// Made again, Ready, its standby gone: what every scenario ends with.
    async fn kept(&self, before: &Pod, svc: &Service) -> Pod {
        let old = before.metadata.uid.as_deref();
        let again = self.ready_named(old).await;
        assert_eq!(
            annotation(&again.metadata, RECREATED_ANNOTATION),
            old,
            "made by the keeper from the pod it replaces:\n{}",
            self.controller.log()
        );
        let (was, now) = (before.spec.as_ref().unwrap(), again.spec.as_ref().unwrap());
        assert_eq!(now.containers[0].command, was.containers[0].command);
        assert_eq!(now.containers[0].args, was.containers[0].args);
        assert_eq!(now.containers[0].image, was.containers[0].image);
        assert_eq!(again.metadata.labels, before.metadata.labels);
        let same = self.service().await;
        assert_eq!(same.metadata.uid, svc.metadata.uid, "the same Service");
        assert_eq!(
            jumppod_plan::objects::node_port(&same),
            jumppod_plan::objects::node_port(svc),
            "the same NodePort"
        );
        wait_for("the standby gone once the jump pod serves", || async {
            self.standbys()
                .await
                .iter()
                .all(|p| !is_active(p))
                .then_some(())
        })
        .await;
        for reason in ["StandbyCreated", "JumpPodRecreated", "StandbyDeleted"] {
            assert!(
                !self.events(reason).await.is_empty(),
                "a {reason} Event:\n{}",
                self.controller.log()
            );
        }
        again
    }

    async fn done(self) {
        drop(self.controller);
        remove_played_nodes(&self.kube, self.ns).await;
        Api::<Namespace>::all(self.kube.client.clone())
            .delete(self.ns, &DeleteParams::default())
            .await
            .expect("delete the namespace");
    }
}

fn node_of(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default()
}

/// `kubectl delete pod` is a person's decision, not a disruption (the pod carries no
/// `DisruptionTarget` condition): the pod is not made again, as without jumppod, and dstack
/// makes a new one at its next job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_jump_pod_deleted_by_hand_is_not_made_again() {
    let project = Project::start("keep-deleted").await;
    project.dstack_made().await;
    project
        .pods()
        .delete(&project.name, &DeleteParams::default())
        .await
        .unwrap();
    let said = wait_for("the DeletedByHand Event", || async {
        project.events("DeletedByHand").await.into_iter().next()
    })
    .await;
    assert!(
        project
            .pods()
            .get_opt(&project.name)
            .await
            .unwrap()
            .is_none(),
        "made again after a deletion by hand:\n{}",
        project.controller.log()
    );
    assert!(
        project.standbys().await.iter().all(|p| !is_active(p)),
        "a standby stands in for a pod deleted by hand"
    );
    assert!(project.events("JumpPodRecreated").await.is_empty());
    eprintln!("{}", said.note.unwrap_or_default());
    project.done().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_bare_jump_pod_is_deleted_and_made_again_under_its_name() {
    let project = Project::start("keep-evicted").await;
    let (pod, svc) = project.dstack_made().await;
    evict(&project.kube, project.ns, &project.name).await;
    project.kept(&pod, &svc).await;
    assert!(!project.events("FinishedPodDeleted").await.is_empty());
    project.done().await;
}

/// The fake kubelet of a node annotated not-ready reports it NotReady once and then says
/// nothing more: the pod on it would stay, terminating, for good once deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_jump_pod_on_a_node_found_lost_is_force_deleted_and_made_again_on_another() {
    let project = Project::start("keep-lost").await;
    let (pod, svc) = project.dstack_made().await;
    let lost = node_of(&pod);
    Api::<Node>::all(project.kube.client.clone())
        .patch(
            &lost,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"jumppod.test/not-ready": "true"}}})),
        )
        .await
        .unwrap();
    let again = project.kept(&pod, &svc).await;
    assert_ne!(node_of(&again), lost, "made again on the lost node");
    assert!(
        !project.events("LostPodDeleted").await.is_empty(),
        "{}",
        project.controller.log()
    );
    project.done().await;
}

/// How long the front holds back the controller's watch of the nodes' Leases: past
/// `--silent-node-after` (20 s), so that every node looks silent at once.
const LEASE_WATCH_HELD: std::time::Duration = std::time::Duration::from_secs(60);

fn watches_node_leases(method: &http::Method, uri: &http::Uri) -> bool {
    *method == http::Method::GET
        && uri.path() == "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
        && uri.query().unwrap_or_default().contains("watch=true")
}

/// The controller's own watch of the nodes' Leases stalls for [`LEASE_WATCH_HELD`] (its list
/// answered, its watch held back by a front of the API server, as a half-open connection holds
/// it): by its clock every node goes silent at once while every kubelet renews its Lease.
/// Taken for what it is, a fault of its view: nothing is made, deleted or taken out of
/// rotation, a `NodesDisrupted` Event says why, and once the watch is back the pod is as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_lease_watch_makes_every_node_silent_at_once_and_nothing_is_done() {
    let user = fresh_user(UserKind::Plain);
    let front =
        SlowFront::start(&kubeconfig_of(&user), watches_node_leases, LEASE_WATCH_HELD).await;
    let project = Project::start_as("keep-stalled", &user, Some(&front)).await;
    let (pod, _) = project.dstack_made().await;
    let began = std::time::Instant::now();
    let said = wait_for("the NodesDisrupted Event", || async {
        let events = project.events("NodesDisrupted").await;
        events.into_iter().next()
    })
    .await;
    eprintln!(
        "{:?} after the jump pod was Ready: {}",
        began.elapsed(),
        said.note.unwrap_or_default()
    );
    // The held watch goes on: the renewals it missed come at once, and no node is silent.
    wait_for_up_to(
        "the controller to see a node renew its Lease again",
        LEASE_WATCH_HELD + std::time::Duration::from_secs(60),
        || async {
            project
                .controller
                .log()
                .contains("the node renews its Lease again")
                .then_some(())
        },
    )
    .await;
    assert!(front.held() >= 1, "no watch of the Leases was held back");
    let now = project.pods().get(&project.name).await.unwrap();
    assert_eq!(
        now.metadata.uid, pod.metadata.uid,
        "the jump pod was replaced"
    );
    assert!(
        now.metadata.deletion_timestamp.is_none() && is_ready(&now),
        "the jump pod was deleted or taken out of rotation: {:?}",
        now.status
    );
    for reason in [
        "StandbyCreated",
        "TakenOutOfRotation",
        "LostPodDeleted",
        "JumpPodRecreated",
    ] {
        assert!(
            project.events(reason).await.is_empty(),
            "a {reason} Event while only the controller's view failed:\n{}",
            project.controller.log()
        );
    }
    assert!(project.standbys().await.is_empty(), "a standby was made");
    drop(front);
    project.done().await;
}

/// dstack 0.22.5's job container script (`get_docker_commands(build_authorized_keys(project,
/// [alice, bob]))`), the fixture the planner's tests read.
const JOB_SCRIPT: &str = include_str!("../../plan/src/grants/dstack-0.22.5-job-args.json");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keys_granted_to_live_jobs_are_kept_in_the_users_keys_secret() {
    let project = Project::start("keep-keys").await;
    let secret_name = jumppod_plan::manifest::keys_secret_name(&project.name);
    // The Secret mounted as the policy's kit mounts it, so that the pod is told of each write.
    project
        .dstack_made_with(Some(json!({"name": jumppod::kit::KEYS_VOLUME,
            "secret": {"secretName": secret_name, "optional": true}})))
        .await;
    let secrets: Api<Secret> = Api::namespaced(project.kube.client.clone(), project.ns);
    // An operator's own entry (`jumppod keys add`): never touched.
    let operator = "command=\"/bin/false\" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHeyQo/3L9deSvuZT1MzN+0KIL2DwIC+7DNGrlLtTOO2 ops\n";
    let seeded: Secret = typed(json!({"metadata": {"name": secret_name},
        "stringData": {"ops": operator}}));
    secrets
        .create(&PostParams::default(), &seeded)
        .await
        .unwrap();

    let script: String = serde_json::from_str(JOB_SCRIPT).unwrap();
    let mut spec = json!({"containers": [{"name": "job-container", "image": "dstackai/base",
        "command": ["/bin/sh"], "args": ["-c", script]}]});
    spec.as_object_mut()
        .unwrap()
        .extend(project.placement().as_object().unwrap().clone());
    let job: Pod = typed(json!({
        "metadata": {"name": "main-job-1", "labels": {
            "app.kubernetes.io/name": "dstack-job", "app.kubernetes.io/instance": "main-job-1",
            "app.kubernetes.io/managed-by": "dstack", "k8s.dstack.ai/project": PROJECT}},
        "spec": spec,
    }));
    project
        .pods()
        .create(&PostParams::default(), &job)
        .await
        .unwrap();
    let entries =
        |s: &Secret| -> Vec<String> { s.data.iter().flatten().map(|(k, _)| k.clone()).collect() };
    let held = wait_for("the job's two users' keys in the Secret", || async {
        let s = secrets.get(&secret_name).await.ok()?;
        (entries(&s).len() == 3).then_some(s)
    })
    .await;
    let data = held.data.unwrap();
    assert_eq!(data["ops"].0, operator.as_bytes());
    let lines: Vec<String> = data
        .iter()
        .filter(|(k, _)| k.starts_with("dstack-job-"))
        .map(|(_, v)| String::from_utf8_lossy(&v.0).into_owned())
        .collect();
    assert_eq!(lines.len(), 2, "alice's and bob's, not the project's");
    assert!(
        lines
            .iter()
            .all(|l| l.starts_with("command=\"/bin/false\" ")),
        "{lines:?}"
    );
    // Alice's key (its comment holds a quote, left out) and Bob's, by their key data.
    for blob in [
        "AAAAC3NzaC1lZDI1NTE5AAAAIHeyQo",
        "AAAAB3NzaC1yc2EAAAADAQABAAAAgQDMU",
    ] {
        assert!(lines.iter().any(|l| l.contains(blob)), "{blob}: {lines:?}");
    }
    project
        .told_of_keys("the jump pod told of the job's keys")
        .await;

    // The job ends: its keys go, the operator's stay.
    project
        .pods()
        .delete("main-job-1", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the job's keys gone from the Secret", || async {
        let s = secrets.get(&secret_name).await.ok()?;
        (entries(&s) == ["ops"]).then_some(())
    })
    .await;
    project
        .told_of_keys("the jump pod told of the keys gone")
        .await;
    project.done().await;
}
