"""dstack's own Kubernetes backend code, driven as a dstack server drives it.

The real-node tests run each generation of dstack server that operators run beside jumppod
through this script, in the virtual environment `make dstack-venv` makes with dstack pinned to
the release in requirements.txt. Nothing of dstack is changed but `JUMP_POD_IMAGE`, pointed at
the test's sshd image (no public registry is reachable here).

Commands (each prints one JSON object on stdout; a failure exits 1 with dstack's error):

  check                 the pinned release, and the signatures of the functions called below
  jump-pod              what `run_job` does for the jump pod: `_create_jump_pod_service_if_not_exists`
  configure             what `update_provisioning_data` does once per job:
                        `_check_and_configure_jump_pod_service`, called again (as the server's
                        background task calls it) until it returns the job's SSH proxy
  job-pod               a job pod with dstack's labels and the runner arguments dstack's
                        `get_docker_commands` gives it (its users' keys as `--ssh-authorized-key`),
                        and the ClusterIP Service `run_job` makes for it
  replicaset            a server of dstack's ReplicaSet change: the ReplicaSet of one pod created
                        if missing, its template the pod `_create_jump_pod_service_if_not_exists`
                        builds, and the Service if missing
  grant                 a job's keys added to the jump pod over SSH, as `update_provisioning_data`
                        adds them (`get_add_authorized_keys_script` run by `_run_ssh_command`)
"""

import argparse
import inspect
import json
import sys
import time

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

import dstack.version
from dstack._internal.core.backends.base.authorized_keys import (
    build_authorized_keys,
    get_add_authorized_keys_script,
)
from dstack._internal.core.backends.base.compute import get_docker_commands
from dstack._internal.core.backends.kubernetes import compute
from dstack._internal.core.backends.kubernetes.resources import (
    build_base_labels,
    filter_invalid_labels,
)
from dstack._internal.core.consts import DSTACK_RUNNER_SSH_PORT

RELEASE = "0.22.5"

# The functions called here, as the pinned release declares them: a release that changed them
# fails `check` instead of being driven wrongly.
SIGNATURES = {
    compute._create_jump_pod_service_if_not_exists: [
        "api",
        "namespace",
        "project_name",
        "jump_pod_name",
        "jump_pod_service_name",
        "jump_pod_port",
        "authorized_keys",
    ],
    compute._check_and_configure_jump_pod_service: [
        "api",
        "namespace",
        "jump_pod_name",
        "jump_pod_service_name",
        "jump_pod_hostname",
        "project_ssh_private_key",
        "authorized_keys",
    ],
    compute._run_ssh_command: ["hostname", "port", "username", "ssh_private_key", "command"],
    get_docker_commands: ["authorized_keys", "bin_path", "pre_runner_commands"],
    get_add_authorized_keys_script: ["authorized_keys", "add_dstack_marker", "options"],
    build_authorized_keys: ["project_ssh_public_key", "extra_authorized_keys"],
    build_base_labels: ["component", "unique_name", "project", "name", "user"],
}


def check(_args, _api):
    problems = []
    if dstack.version.__version__ != RELEASE:
        problems.append(f"dstack {dstack.version.__version__} is installed, not {RELEASE}")
    for function, expected in SIGNATURES.items():
        found = list(inspect.signature(function).parameters)
        if found != expected:
            problems.append(f"{function.__qualname__}{tuple(found)}: expected {tuple(expected)}")
    if problems:
        raise SystemExit("dstack is not the release these tests drive:\n  " + "\n  ".join(problems))
    return {"dstack": dstack.version.__version__, "jump_pod_image": compute.JUMP_POD_IMAGE}


def names(project):
    """The jump pod's and its Service's names, as `run_job` makes them."""
    jump_pod = f"dstack-{project}-ssh-jump-pod"
    return jump_pod, compute._get_pod_service_name(jump_pod)


def read(path):
    with open(path) as f:
        return f.read().strip()


def private_key(path):
    """A private key as the server holds it: OpenSSH refuses one without its last newline
    ("error in libcrypto") when `_run_ssh_command` writes it to a file."""
    return read(path) + "\n"


def objects(api, namespace, project):
    """The uids of the jump pod and its Service, and the Service's NodePort (None when absent)."""
    jump_pod, service = names(project)
    found = {"pod_uid": None, "service_uid": None, "node_port": None}
    try:
        found["pod_uid"] = api.read_namespaced_pod(jump_pod, namespace).metadata.uid
    except ApiException as e:
        if e.status != 404:
            raise
    try:
        svc = api.read_namespaced_service(service, namespace)
        found["service_uid"] = svc.metadata.uid
        found["node_port"] = svc.spec.ports[0].node_port
    except ApiException as e:
        if e.status != 404:
            raise
    return found


def create_if_missing(args, api):
    """What run_job does for the jump pod, through `api`."""
    jump_pod, service = names(args.project)
    compute._create_jump_pod_service_if_not_exists(
        api=api,
        namespace=args.namespace,
        project_name=args.project,
        jump_pod_name=jump_pod,
        jump_pod_service_name=service,
        jump_pod_port=args.port,
        # As run_job: the project key alone; users' keys come later, over SSH.
        authorized_keys=build_authorized_keys(read(args.project_key), []),
    )


def jump_pod(args, api):
    create_if_missing(args, api)
    return objects(api, args.namespace, args.project)


def configure(args, api):
    jump_pod, service = names(args.project)
    deadline = time.monotonic() + args.timeout
    calls = 0
    while True:
        calls += 1
        ssh_proxy = compute._check_and_configure_jump_pod_service(
            api=api,
            namespace=args.namespace,
            jump_pod_name=jump_pod,
            jump_pod_service_name=service,
            jump_pod_hostname=args.hostname,
            project_ssh_private_key=private_key(args.project_private_key),
            authorized_keys=[read(k) for k in args.key],
        )
        if ssh_proxy is not None:
            return {
                "hostname": ssh_proxy.hostname,
                "port": ssh_proxy.port,
                "username": ssh_proxy.username,
                "calls": calls,
            }
        if time.monotonic() > deadline:
            raise SystemExit(
                f"the jump pod did not let dstack in within {args.timeout} s ({calls} calls)"
            )
        # The server's background task comes back every few seconds.
        time.sleep(2)


def job_pod(args, api):
    keys = build_authorized_keys(read(args.project_key), [read(k) for k in args.key])
    labels = filter_invalid_labels(
        build_base_labels(
            component="job",
            unique_name=args.name,
            project=args.project,
            name=args.job,
            user=args.user,
        )
    )
    # dstack's runner is downloaded at the pod's start, which cannot happen here: the container
    # runs the test's stand-in (`--runner`), which serves SSH on the runner's port. dstack's own
    # arguments are passed to it untouched, so the pod spec carries what a server writes there.
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name=args.name, labels=labels),
        spec=client.V1PodSpec(
            containers=[
                client.V1Container(
                    name=f"{args.name}-container",
                    image=args.image,
                    command=["/bin/sh", "-c", args.runner, "runner"],
                    args=["-c", " && ".join(get_docker_commands(keys))],
                    env=[client.V1EnvVar(name="JOB_AUTHORIZED_KEYS", value="\n".join(keys))],
                    ports=[client.V1ContainerPort(container_port=DSTACK_RUNNER_SSH_PORT)],
                )
            ],
        ),
    )
    created = api.create_namespaced_pod(args.namespace, pod)
    service = api.create_namespaced_service(
        args.namespace,
        client.V1Service(
            metadata=client.V1ObjectMeta(name=compute._get_pod_service_name(args.name), labels=labels),
            spec=client.V1ServiceSpec(
                type="ClusterIP",
                selector=compute._build_service_selector_from_labels(labels),
                ports=[client.V1ServicePort(port=DSTACK_RUNNER_SSH_PORT)],
            ),
        ),
    )
    return {"pod_uid": created.metadata.uid, "cluster_ip": service.spec.cluster_ip}


class Recorder:
    """A CoreV1Api that finds nothing and records what is created: how the pod and Service
    `_create_jump_pod_service_if_not_exists` builds are had without sending them."""

    def __init__(self, api):
        self.api = api
        self.created = {}

    def __getattr__(self, name):
        if name.startswith("read_namespace"):
            def missing(*_args, **_kwargs):
                raise ApiException(status=404, reason="Not Found")

            return missing
        if name.startswith("delete_"):
            return lambda *_args, **_kwargs: None
        if name in ("create_namespaced_pod", "create_namespaced_service"):
            return lambda namespace, body: self.created.__setitem__(name, body)
        if name == "create_namespace":
            return lambda body: None
        # The node list, for the tolerations.
        return getattr(self.api, name)


def replicaset(args, api):
    jump_pod, service = names(args.project)
    recorder = Recorder(api)
    create_if_missing(args, recorder)
    pod = recorder.created["create_namespaced_pod"]
    apps = client.AppsV1Api(api.api_client)
    created = []
    try:
        apps.read_namespaced_replica_set(jump_pod, args.namespace)
    except ApiException as e:
        if e.status != 404:
            raise
        selector = {"app.kubernetes.io/instance": pod.metadata.labels["app.kubernetes.io/instance"]}
        apps.create_namespaced_replica_set(
            args.namespace,
            client.V1ReplicaSet(
                metadata=client.V1ObjectMeta(name=jump_pod, labels=pod.metadata.labels),
                spec=client.V1ReplicaSetSpec(
                    replicas=1,
                    selector=client.V1LabelSelector(match_labels=selector),
                    template=client.V1PodTemplateSpec(
                        metadata=client.V1ObjectMeta(labels=pod.metadata.labels),
                        spec=pod.spec,
                    ),
                ),
            ),
        )
        created.append("replicaset")
    try:
        api.read_namespaced_service(service, args.namespace)
    except ApiException as e:
        if e.status != 404:
            raise
        api.create_namespaced_service(args.namespace, recorder.created["create_namespaced_service"])
        created.append("service")
    found = objects(api, args.namespace, args.project)
    found["created"] = created
    return found


def grant(args, _api):
    command = get_add_authorized_keys_script(
        [read(k) for k in args.key], add_dstack_marker=False, options='command="/bin/false"'
    )
    status, output = compute._run_ssh_command(
        hostname=args.hostname,
        port=args.port,
        username=compute.JUMP_POD_USER,
        ssh_private_key=private_key(args.project_private_key),
        command=command,
    )
    if status != 0:
        raise SystemExit(f"ssh exited {status}: {output.decode(errors='replace')}")
    return {"status": status}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", help="the cluster (every command but check and grant)")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--image", help="JUMP_POD_IMAGE (and a job pod's image)")
    commands = parser.add_subparsers(dest="command", required=True)

    commands.add_parser("check")
    for name in ("jump-pod", "replicaset"):
        p = commands.add_parser(name)
        p.add_argument("--project", required=True)
        p.add_argument("--project-key", required=True, help="the project's public key file")
        p.add_argument("--port", type=int, help="proxy_jump.port")

    p = commands.add_parser("configure")
    p.add_argument("--project", required=True)
    p.add_argument("--project-private-key", required=True)
    p.add_argument("--hostname", required=True, help="proxy_jump.hostname")
    p.add_argument("--key", action="append", default=[], help="a job's user key file")
    p.add_argument("--timeout", type=float, default=120)

    p = commands.add_parser("job-pod")
    p.add_argument("--project", required=True)
    p.add_argument("--name", required=True, help="the job pod's name")
    p.add_argument("--job", default="job", help="the job's name")
    p.add_argument("--user", default="admin")
    p.add_argument("--project-key", required=True)
    p.add_argument("--key", action="append", default=[], help="a user key file")
    p.add_argument("--runner", required=True, help="the stand-in for dstack's runner: a shell command")

    p = commands.add_parser("grant")
    p.add_argument("--project-private-key", required=True)
    p.add_argument("--hostname", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--key", action="append", default=[], required=True)

    args = parser.parse_args()
    if args.image:
        compute.JUMP_POD_IMAGE = args.image
    api = None
    if args.command not in ("check", "grant"):
        if not args.kubeconfig:
            parser.error(f"{args.command} needs --kubeconfig")
        config.load_kube_config(args.kubeconfig)
        api = client.CoreV1Api()
    handlers = {
        "check": check,
        "jump-pod": jump_pod,
        "configure": configure,
        "job-pod": job_pod,
        "replicaset": replicaset,
        "grant": grant,
    }
    try:
        result = handlers[args.command](args, api)
    except ApiException as e:
        raise SystemExit(f"{args.command}: the API answered {e.status} {e.reason}: {e.body}")
    json.dump(result, sys.stdout)
    print()


if __name__ == "__main__":
    main()
