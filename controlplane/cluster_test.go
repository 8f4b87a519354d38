package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// TestMain lets this test binary be the components: startChild runs
// os.Executable() with a component's name, which under `go test` is this
// binary rather than jumppod-controlplane.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy":
			main()
			return
		}
	}
	os.Exit(m.Run())
}

func testOptions(dir string) upOptions {
	return upOptions{dir: dir, nodes: 3, nodeCPU: "4", nodeMemory: "8Gi", startTimeout: 180 * time.Second}
}

// One start of the whole control plane, then what the jumppod tests rely on.
func TestControlPlaneRunsReplicaSetsSchedulesAuditsAndStopsClean(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, err := startCluster(ctx, testOptions(dir))
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	defer c.stop()
	admin, err := clientFor(c.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}

	var ready readyFile
	data, err := os.ReadFile(filepath.Join(dir, "ready.json"))
	if err != nil || json.Unmarshal(data, &ready) != nil {
		t.Fatalf("ready.json: %v %s", err, data)
	}
	if ready.Kubeconfig != c.kubeconfig || ready.Server != c.server || ready.Pid != os.Getpid() {
		t.Errorf("ready.json = %+v", ready)
	}
	for _, f := range []string{ready.WebhookCA, ready.WebhookCert, ready.WebhookKey, ready.Users["user-8"]} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("missing file: %v", err)
		}
	}

	t.Run("a ReplicaSet's pod becomes Running and Ready, and is gone after the ReplicaSet is deleted", func(t *testing.T) {
		ns := createNamespace(ctx, t, admin, "rs")
		labels := map[string]string{"app": "jump"}
		rs := &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: "jump"},
			Spec: appsv1.ReplicaSetSpec{
				Replicas: ptr.To[int32](1),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "sshd"}}},
				},
			},
		}
		if _, err := admin.AppsV1().ReplicaSets(ns).Create(ctx, rs, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		poll(ctx, t, "a Running and Ready pod", func() bool {
			pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=jump"})
			return err == nil && len(pods.Items) == 1 && pods.Items[0].Status.Phase == corev1.PodRunning &&
				podConditionTrue(&pods.Items[0], corev1.PodReady) && pods.Items[0].Status.PodIP != ""
		})
		if err := admin.AppsV1().ReplicaSets(ns).Delete(ctx, "jump", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		poll(ctx, t, "no pods left", func() bool {
			pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			return err == nil && len(pods.Items) == 0
		})
	})

	t.Run("a pod asking for 100 cpus stays Pending with the scheduler's Insufficient cpu", func(t *testing.T) {
		ns := createNamespace(ctx, t, admin, "huge")
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "huge"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "c", Image: "sshd",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100")}},
			}}},
		}
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var message string
		poll(ctx, t, "an Unschedulable condition", func() bool {
			p, err := admin.CoreV1().Pods(ns).Get(ctx, "huge", metav1.GetOptions{})
			if err != nil {
				return false
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable {
					message = c.Message
					return p.Status.Phase == corev1.PodPending
				}
			}
			return false
		})
		if !strings.Contains(message, "0/3 nodes are available") || !strings.Contains(message, "Insufficient cpu") {
			t.Errorf("scheduler message = %q", message)
		}
	})

	t.Run("a plain user is refused with 403 and the audit log records it", func(t *testing.T) {
		user, err := clientFor(ready.Users["user-1"])
		if err != nil {
			t.Fatal(err)
		}
		_, err = user.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `User "user-1" cannot list resource "pods"`) {
			t.Fatalf("want 403 for user-1, got %v", err)
		}
		poll(ctx, t, "the audit line of user-1's list", func() bool {
			return auditHas(t, c.auditLog, func(e auditEvent) bool {
				return e.User.Username == "user-1" && e.Verb == "list" && e.ObjectRef.Resource == "pods" &&
					e.ResponseStatus.Code == 403 && e.UserAgent == "jumppod-controlplane"
			})
		})
	})

	t.Run("a node marked not ready reports Ready=False, gets tainted, and comes back", func(t *testing.T) {
		if err := setNodeNotReady(ctx, c.kubeconfig, "node-3", true); err != nil {
			t.Fatal(err)
		}
		poll(ctx, t, "node-3 NotReady and tainted not-ready", func() bool {
			n, err := admin.CoreV1().Nodes().Get(ctx, "node-3", metav1.GetOptions{})
			return err == nil && !nodeReady(n) && hasTaint(n, "node.kubernetes.io/not-ready")
		})
		if err := setNodeNotReady(ctx, c.kubeconfig, "node-3", false); err != nil {
			t.Fatal(err)
		}
		poll(ctx, t, "node-3 Ready and untainted", func() bool {
			n, err := admin.CoreV1().Nodes().Get(ctx, "node-3", metav1.GetOptions{})
			return err == nil && nodeReady(n) && len(n.Spec.Taints) == 0
		})
	})

	t.Run("the apiserver calls a mutating webhook served with the webhook/ certificates", func(t *testing.T) {
		ns := createNamespace(ctx, t, admin, "hook")
		url := serveLabellingWebhook(t, ready.WebhookCert, ready.WebhookKey)
		caBundle, err := os.ReadFile(ready.WebhookCA)
		if err != nil {
			t.Fatal(err)
		}
		hook := &admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "label-" + ns},
			Webhooks: []admissionregistrationv1.MutatingWebhook{{
				Name:                    "label.jumppod.test",
				ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caBundle},
				AdmissionReviewVersions: []string{"v1"},
				SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
				FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
				TimeoutSeconds:          ptr.To[int32](5),
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
					"kubernetes.io/metadata.name": ns,
				}},
				Rules: []admissionregistrationv1.RuleWithOperations{{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule: admissionregistrationv1.Rule{
						APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"},
					},
				}},
			}},
		}
		if _, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, hook, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, hook.Name, metav1.DeleteOptions{})
		// The configuration reaches the admission chain asynchronously: dry-run
		// creates until one comes back labelled.
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "marker"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "sshd"}}},
		}
		poll(ctx, t, "a pod labelled by the webhook", func() bool {
			got, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				t.Logf("dry-run create: %v", err)
				return false
			}
			return got.Labels["jumppod.test/webhook"] == "seen"
		})
	})

	c.stop()
	for _, ch := range c.children {
		if !ch.exited() {
			t.Errorf("%s still running after stop", ch.name)
		}
	}
	u, _ := url.Parse(c.server)
	if conn, err := net.DialTimeout("tcp", u.Host, time.Second); err == nil {
		conn.Close()
		t.Errorf("%s still accepts connections after stop", c.server)
	}
}

// A component that cannot start is named, with its log and the log's end.
func TestAComponentThatFailsIsNamedWithItsLog(t *testing.T) {
	t.Setenv("JUMPPOD_CONTROLPLANE_KUBE_SCHEDULER_ARGS", "--no-such-flag=1")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	_, err := startCluster(ctx, testOptions(dir))
	if err == nil {
		t.Fatal("start succeeded with a broken scheduler")
	}
	msg := err.Error()
	for _, want := range []string{"kube-scheduler: exited", filepath.Join(dir, "logs", "kube-scheduler.log"), "unknown flag: --no-such-flag"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not contain %q:\n%s", want, msg)
		}
	}
}

func createNamespace(ctx context.Context, t *testing.T, client kubernetes.Interface, prefix string) string {
	t.Helper()
	ns, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Pods are refused until the serviceaccount controller made "default".
	poll(ctx, t, "the default service account of "+ns.Name, func() bool {
		_, err := client.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})
	return ns.Name
}

func poll(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func hasTaint(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

// auditEvent is the part of an audit.k8s.io/v1 Event the tests read.
type auditEvent struct {
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	User      struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef struct {
		Resource string `json:"resource"`
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

func auditHas(t *testing.T, path string, match func(auditEvent) bool) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit line is not JSON: %v: %s", err, sc.Text())
		}
		if match(e) {
			return true
		}
	}
	return false
}

// serveLabellingWebhook serves, on 127.0.0.1 with the given pair, a mutating
// webhook that labels every pod jumppod.test/webhook=seen (AdmissionReview
// v1, JSONPatch), and returns its URL.
func serveLabellingWebhook(t *testing.T, certFile, keyFile string) string {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		patch := `[{"op":"add","path":"/metadata/labels","value":{"jumppod.test/webhook":"seen"}}]`
		review.Response = &admissionv1.AdmissionResponse{
			UID: review.Request.UID, Allowed: true,
			PatchType: ptr.To(admissionv1.PatchTypeJSONPatch), Patch: []byte(patch),
		}
		review.Request = nil
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(review)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL + "/mutate"
}
