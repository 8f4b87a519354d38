package main

import (
	"context"
	"io"
	"log"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func boundPod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{
			NodeName:       node,
			InitContainers: []corev1.Container{{Name: "init", Image: "busybox"}},
			Containers:     []corev1.Container{{Name: "sshd", Image: "sshd:1"}, {Name: "side", Image: "side:2"}},
		},
		Status: corev1.PodStatus{
			Phase:    corev1.PodPending,
			QOSClass: corev1.PodQOSGuaranteed,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
				{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady"},
			},
		},
	}
}

func TestNextPodAction(t *testing.T) {
	now := metav1.Now()
	running := boundPod("p", "node-1")
	running.Status = runningStatus(running, "127.0.0.1", "10.244.1.2", now)
	deleting := running.DeepCopy()
	deleting.DeletionTimestamp = &now
	failed := running.DeepCopy()
	failed.Status.Phase = corev1.PodFailed
	failed.Status.Reason = "Evicted"
	runningNotReady := running.DeepCopy()
	runningNotReady.Status.Conditions = setPodCondition(nil, corev1.PodScheduled, now)
	unpullable := boundPod("p", "node-1")
	unpullable.Spec.Containers[1].Image = "registry.invalid/side:2"
	backingOff := unpullable.DeepCopy()
	backingOff.Status = pullBackOffStatus(unpullable, "127.0.0.1", "registry.invalid/side:2", now)

	cases := []struct {
		name string
		pod  *corev1.Pod
		want podAction
	}{
		{"a pending pod bound to the node is started", boundPod("p", "node-1"), podStart},
		{"a running ready pod with an IP is left alone", running, podNothing},
		{"a running pod that is not ready is started again", runningNotReady, podStart},
		{"a pod with a deletion timestamp has its deletion finished", deleting, podFinishDeletion},
		{"an evicted (failed) pod is not restarted", failed, podNothing},
		{"a pod with an image from a registry under .invalid backs off pulling", unpullable, podPullBackOff},
		{"a back-off already reported is not written again", backingOff, podNothing},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := nextPodAction(c.pod); got != c.want {
				t.Fatalf("nextPodAction = %d, want %d", got, c.want)
			}
		})
	}
}

func TestRunningStatusIsWhatAKubeletReports(t *testing.T) {
	pod := boundPod("p", "node-1")
	now := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	st := runningStatus(pod, "127.0.0.1", "10.244.1.7", now)

	if st.Phase != corev1.PodRunning || st.PodIP != "10.244.1.7" || st.HostIP != "127.0.0.1" {
		t.Fatalf("phase/podIP/hostIP = %s/%s/%s", st.Phase, st.PodIP, st.HostIP)
	}
	if len(st.PodIPs) != 1 || st.PodIPs[0].IP != "10.244.1.7" || len(st.HostIPs) != 1 {
		t.Fatalf("podIPs/hostIPs = %v/%v", st.PodIPs, st.HostIPs)
	}
	if st.QOSClass != corev1.PodQOSGuaranteed {
		t.Fatalf("qosClass not kept: %q", st.QOSClass)
	}
	for _, ct := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady, corev1.PodReadyToStartContainers} {
		if !podConditionTrue(&corev1.Pod{Status: st}, ct) {
			t.Errorf("condition %s is not True in %v", ct, st.Conditions)
		}
	}
	if n := len(st.Conditions); n != 5 {
		t.Errorf("want 5 conditions (one each), got %d: %v", n, st.Conditions)
	}
	if len(st.ContainerStatuses) != 2 {
		t.Fatalf("want a status per container, got %v", st.ContainerStatuses)
	}
	for i, cs := range st.ContainerStatuses {
		if cs.Name != pod.Spec.Containers[i].Name || !cs.Ready || cs.State.Running == nil || !ptr.Deref(cs.Started, false) {
			t.Errorf("container status %d not running and ready: %+v", i, cs)
		}
	}
	if len(st.InitContainerStatuses) != 1 || st.InitContainerStatuses[0].State.Terminated == nil ||
		st.InitContainerStatuses[0].State.Terminated.Reason != "Completed" {
		t.Errorf("init container not completed: %+v", st.InitContainerStatuses)
	}
	if st.StartTime == nil || !st.StartTime.Equal(&now) {
		t.Errorf("startTime = %v", st.StartTime)
	}
	// The input is not modified: the informer cache must stay untouched.
	if pod.Status.Phase != corev1.PodPending || len(pod.Status.Conditions) != 2 {
		t.Errorf("input pod was modified: %+v", pod.Status)
	}
}

func TestNewNodeOffersItsShapeAndIsReady(t *testing.T) {
	shape := nodeShape{count: 3, cpu: resource.MustParse("4"), memory: resource.MustParse("8Gi")}
	node := newNode(2, shape, metav1.Now())
	if node.Name != "node-2" || node.Spec.PodCIDR != "10.244.2.0/24" {
		t.Fatalf("name/podCIDR = %s/%s", node.Name, node.Spec.PodCIDR)
	}
	if !nodeReady(node) {
		t.Fatal("new node is not Ready")
	}
	want := map[corev1.ResourceName]string{"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "100Gi"}
	for name, q := range want {
		got := node.Status.Allocatable[name]
		if got.Cmp(resource.MustParse(q)) != 0 {
			t.Errorf("allocatable %s = %s, want %s", name, got.String(), q)
		}
	}
	var external bool
	for _, a := range node.Status.Addresses {
		external = external || (a.Type == corev1.NodeExternalIP && a.Address == "127.0.0.1")
	}
	if !external {
		t.Errorf("no ExternalIP 127.0.0.1 in %v", node.Status.Addresses)
	}
}

// The fake kubelet against a fake clientset: a bound pod becomes Running,
// a pod bound elsewhere is left alone, a deleting pod is removed.
func TestFakeKubeletStartsBoundPodsAndFinishesDeletions(t *testing.T) {
	mine := boundPod("mine", "node-1")
	elsewhere := boundPod("elsewhere", "other-node")
	elsewhere.UID = "uid-elsewhere"
	client := fake.NewClientset(mine, elsewhere)
	shape := nodeShape{count: 2, cpu: resource.MustParse("2"), memory: resource.MustParse("4Gi")}
	k := newFakeKubelet(client, shape, log.New(io.Discard, "", 0))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, 1)
	go func() { errs <- k.run(ctx) }()

	waitPod := func(what string, cond func(*corev1.Pod, error) bool) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			p, err := client.CoreV1().Pods("ns").Get(ctx, "mine", metav1.GetOptions{})
			return cond(p, err), nil
		})
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	waitPod("the bound pod to run", func(p *corev1.Pod, err error) bool {
		return err == nil && p.Status.Phase == corev1.PodRunning && podConditionTrue(p, corev1.PodReady)
	})
	p, _ := client.CoreV1().Pods("ns").Get(ctx, "mine", metav1.GetOptions{})
	if p.Status.PodIP != "10.244.1.2" {
		t.Errorf("first pod IP of node-1 = %q, want 10.244.1.2", p.Status.PodIP)
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 2 {
		t.Fatalf("registered nodes: %v, %v", nodes, err)
	}
	other, _ := client.CoreV1().Pods("ns").Get(ctx, "elsewhere", metav1.GetOptions{})
	if other.Status.Phase != corev1.PodPending {
		t.Errorf("a pod on another node was touched: %s", other.Status.Phase)
	}

	// What the apiserver does on a graceful DELETE: set the timestamp.
	now := metav1.Now()
	p.DeletionTimestamp = &now
	p.DeletionGracePeriodSeconds = ptr.To[int64](30)
	if _, err := client.CoreV1().Pods("ns").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod("the deleting pod to be gone", func(_ *corev1.Pod, err error) bool { return err != nil })

	cancel()
	if err := <-errs; err != nil {
		t.Fatalf("run: %v", err)
	}
}

func TestTokenFileListsGroupsQuoted(t *testing.T) {
	got := string(tokenFile([]identity{
		{name: "admin", token: "t1", groups: []string{"system:masters"}},
		{name: "user-1", token: "t2"},
	}))
	want := "t1,admin,admin,\"system:masters\"\nt2,user-1,user-1\n"
	if got != want {
		t.Fatalf("tokenFile =\n%s\nwant\n%s", got, want)
	}
}

func TestRegistryHost(t *testing.T) {
	cases := map[string]string{
		"registry.invalid/sshd:1":        "registry.invalid",
		"registry.invalid:5000/a/b:1":    "registry.invalid",
		"localhost/sshd":                 "localhost",
		"sshd:1":                         "",
		"testcontainers/sshd:1.3.0":      "",
		"ghcr.io/dstackai/sshd@sha256:0": "ghcr.io",
	}
	for image, want := range cases {
		if got := registryHost(image); got != want {
			t.Errorf("registryHost(%q) = %q, want %q", image, got, want)
		}
	}
}

func TestPullBackOffStatusIsWhatAKubeletReports(t *testing.T) {
	pod := boundPod("p", "node-1")
	st := pullBackOffStatus(pod, "127.0.0.1", "registry.invalid/sshd:1", metav1.Now())
	if st.Phase != corev1.PodPending || st.PodIP != "" {
		t.Fatalf("phase %s, pod IP %q: a pod whose image is not pulled stays Pending without an IP", st.Phase, st.PodIP)
	}
	for _, c := range st.Conditions {
		if c.Type == corev1.PodReady && (c.Status != corev1.ConditionFalse || c.Reason != "ContainersNotReady") {
			t.Fatalf("Ready is %s (%s), want False (ContainersNotReady)", c.Status, c.Reason)
		}
	}
	if len(st.ContainerStatuses) != 2 {
		t.Fatalf("%d container statuses, want 2", len(st.ContainerStatuses))
	}
	for _, cs := range st.ContainerStatuses {
		w := cs.State.Waiting
		if w == nil || w.Reason != "ImagePullBackOff" || cs.Ready || cs.ContainerID != "" {
			t.Fatalf("container %s: %+v, want waiting in ImagePullBackOff, not ready, no container", cs.Name, cs)
		}
	}
	if w := st.ContainerStatuses[0].State.Waiting; !strings.Contains(w.Message, "lookup registry.invalid: no such host") {
		t.Fatalf("message %q does not give the runtime's error", w.Message)
	}
}

// A node a test creates with playLabel is played too: its pods run with IPs
// of their own /24, it gets a Lease and is reported Ready; an unlabelled
// node stays the test's.
func TestFakeKubeletPlaysANodeLabelledForIt(t *testing.T) {
	played := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1", Labels: map[string]string{playLabel: "true"}}}
	client := fake.NewClientset(boundPod("on-gpu", "gpu-1"), boundPod("on-plain", "plain-1"))
	shape := nodeShape{count: 1, cpu: resource.MustParse("2"), memory: resource.MustParse("4Gi")}
	k := newFakeKubelet(client, shape, log.New(io.Discard, "", 0))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, 1)
	go func() { errs <- k.run(ctx) }()
	for _, n := range []*corev1.Node{played, {ObjectMeta: metav1.ObjectMeta{Name: "plain-1"}}} {
		if _, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods("ns").Get(ctx, "on-gpu", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("waiting for the pod on the played node to run: %v", err)
	}
	p, _ := client.CoreV1().Pods("ns").Get(ctx, "on-gpu", metav1.GetOptions{})
	if p.Status.PodIP != "10.244.2.2" {
		t.Errorf("first pod IP of the first played node = %q, want 10.244.2.2", p.Status.PodIP)
	}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, "gpu-1", metav1.GetOptions{})
		_, lerr := client.CoordinationV1().Leases(leaseNamespace).Get(ctx, "gpu-1", metav1.GetOptions{})
		return err == nil && nodeReady(n) && lerr == nil, nil
	})
	if err != nil {
		t.Fatalf("waiting for the played node's Ready and Lease: %v", err)
	}
	plain, _ := client.CoreV1().Pods("ns").Get(ctx, "on-plain", metav1.GetOptions{})
	if plain.Status.Phase != corev1.PodPending {
		t.Errorf("a pod on an unlabelled node was touched: %s", plain.Status.Phase)
	}
	cancel()
	if err := <-errs; err != nil {
		t.Fatalf("run: %v", err)
	}
}
