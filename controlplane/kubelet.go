package main

import (
	"context"
	"fmt"
	"log"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
)

// notReadyAnnotation on a Node makes the fake kubelet behave as a dead one:
// it reports Ready=False once, then stops renewing the node's Lease and stops
// touching the node's pods, until the annotation is removed.
const notReadyAnnotation = "jumppod.test/not-ready"

// playLabel=true on a Node a test creates makes the fake kubelet play it as it
// plays node-1..N: it posts Ready, renews its Lease and runs the pods bound to
// it. The test gives the node what the scenario needs (labels, taints,
// capacity, addresses), so no other test's pod lands on it unless it
// tolerates its taints, and it may delete it.
const playLabel = "jumppod.test/fake-kubelet"

// Intervals of a real kubelet: the Lease is renewed every 10s and lasts 40s
// (kubelet's nodeLeaseDurationSeconds); node-lifecycle marks a node
// Unknown once its Lease is older than --node-monitor-grace-period.
const (
	leaseNamespace     = "kube-node-lease"
	leaseDuration      = 40
	leaseRenewInterval = 10 * time.Second
	podIndexByNode     = "node"
	kubeletVersion     = "v1.36.3"
)

// nodeShape is what every fake node offers the scheduler.
type nodeShape struct {
	count  int
	cpu    resource.Quantity
	memory resource.Quantity
}

// fakeKubelet plays the kubelet's part for a set of nodes: it registers them,
// heartbeats their Leases, starts the pods bound to them (Running, Ready, an
// IP) and finishes their pods' deletions. It reacts to watch events only.
type fakeKubelet struct {
	client kubernetes.Interface
	shape  nodeShape
	log    *log.Logger

	pods   cache.SharedIndexInformer
	nodes  cache.SharedIndexInformer
	queue  workqueue.TypedRateLimitingInterface[string]
	mu     sync.Mutex
	states map[string]*nodeState
	leases map[string]*coordinationv1.Lease // last written, per node
}

// nodeState is what the fake kubelet knows of one of its nodes.
type nodeState struct {
	index    int  // node-<index>; also the third octet of its pod IPs
	notReady bool // annotation set: behave as a dead kubelet
	deleted  bool // someone deleted the Node: a deleted node stays gone
	nextIP   int
}

func newFakeKubelet(client kubernetes.Interface, shape nodeShape, logger *log.Logger) *fakeKubelet {
	k := &fakeKubelet{
		client: client,
		shape:  shape,
		log:    logger,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "fake-kubelet-pods"}),
		states: map[string]*nodeState{},
		leases: map[string]*coordinationv1.Lease{},
	}
	for i := 1; i <= shape.count; i++ {
		k.states[nodeName(i)] = &nodeState{index: i, nextIP: 2}
	}
	// Only bound pods: unscheduled ones are the scheduler's business.
	k.pods = coreinformers.NewFilteredPodInformer(client, metav1.NamespaceAll, 0,
		cache.Indexers{podIndexByNode: func(obj any) ([]string, error) {
			return []string{obj.(*corev1.Pod).Spec.NodeName}, nil
		}},
		func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName!=" })
	k.nodes = coreinformers.NewNodeInformer(client, 0, cache.Indexers{})
	return k
}

func nodeName(i int) string { return fmt.Sprintf("node-%d", i) }

// run registers the nodes, then serves until ctx is done.
func (k *fakeKubelet) run(ctx context.Context) error {
	for i := 1; i <= k.shape.count; i++ {
		if err := k.register(ctx, i); err != nil {
			return fmt.Errorf("registering %s: %w", nodeName(i), err)
		}
	}
	_, err := k.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    k.enqueuePod,
		UpdateFunc: func(_, obj any) { k.enqueuePod(obj) },
		DeleteFunc: k.enqueuePod,
	})
	if err != nil {
		return err
	}
	_, err = k.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    k.nodeChanged,
		UpdateFunc: func(_, obj any) { k.nodeChanged(obj) },
		DeleteFunc: k.nodeDeleted,
	})
	if err != nil {
		return err
	}
	go k.pods.Run(ctx.Done())
	go k.nodes.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), k.pods.HasSynced, k.nodes.HasSynced) {
		return ctx.Err()
	}
	go func() {
		<-ctx.Done()
		k.queue.ShutDown()
	}()
	for w := 0; w < 2; w++ {
		go func() {
			for k.processNext(ctx) {
			}
		}()
	}
	k.heartbeat(ctx)
	return nil
}

// register creates the Node with its status, as a kubelet does when it
// first starts; an existing Node gets its status rewritten instead.
func (k *fakeKubelet) register(ctx context.Context, index int) error {
	node := newNode(index, k.shape, metav1.Now())
	_, err := k.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return k.postNodeStatus(ctx, node.Name, true)
	}
	return err
}

// newNode is a Ready node with the capacity of the shape, reachable on
// loopback (tests connect to NodePorts on 127.0.0.1).
func newNode(index int, shape nodeShape, now metav1.Time) *corev1.Node {
	name := nodeName(index)
	resources := corev1.ResourceList{
		corev1.ResourceCPU:              shape.cpu,
		corev1.ResourceMemory:           shape.memory,
		corev1.ResourcePods:             resource.MustParse("110"),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				"kubernetes.io/hostname": name,
				"kubernetes.io/os":       "linux",
				"kubernetes.io/arch":     "amd64",
				"jumppod.test/fake-node": "true",
			},
		},
		Spec: corev1.NodeSpec{PodCIDR: podCIDR(index), PodCIDRs: []string{podCIDR(index)}},
		Status: corev1.NodeStatus{
			Capacity:    resources,
			Allocatable: resources.DeepCopy(),
			Phase:       corev1.NodeRunning,
			Conditions:  nodeConditions(true, now),
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: "127.0.0.1"},
				{Type: corev1.NodeExternalIP, Address: "127.0.0.1"},
				{Type: corev1.NodeHostName, Address: name},
			},
			NodeInfo: corev1.NodeSystemInfo{
				KubeletVersion:          kubeletVersion,
				OperatingSystem:         "linux",
				Architecture:            "amd64",
				ContainerRuntimeVersion: "fake://1.0.0",
				OSImage:                 "jumppod fake node",
				KernelVersion:           "fake",
			},
		},
	}
}

func podCIDR(index int) string { return fmt.Sprintf("10.244.%d.0/24", index) }

// nodeConditions are a healthy kubelet's conditions, or a failing one's
// Ready=False (what a kubelet reports when its runtime is down).
func nodeConditions(ready bool, now metav1.Time) []corev1.NodeCondition {
	readyCond := corev1.NodeCondition{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue,
		Reason: "KubeletReady", Message: "fake kubelet is posting ready status",
		LastHeartbeatTime: now, LastTransitionTime: now,
	}
	if !ready {
		readyCond.Status = corev1.ConditionFalse
		readyCond.Reason = "KubeletNotReady"
		readyCond.Message = "fake kubelet stopped: annotation " + notReadyAnnotation + "=true"
	}
	conds := []corev1.NodeCondition{readyCond}
	// The kubelet's own reasons for the pressure conditions being False.
	for _, p := range []struct {
		t      corev1.NodeConditionType
		reason string
	}{
		{corev1.NodeMemoryPressure, "KubeletHasSufficientMemory"},
		{corev1.NodeDiskPressure, "KubeletHasNoDiskPressure"},
		{corev1.NodePIDPressure, "KubeletHasSufficientPID"},
	} {
		conds = append(conds, corev1.NodeCondition{
			Type: p.t, Status: corev1.ConditionFalse, Reason: p.reason,
			LastHeartbeatTime: now, LastTransitionTime: now,
		})
	}
	return conds
}

// postNodeStatus sets the node's conditions to ready or not ready.
func (k *fakeKubelet) postNodeStatus(ctx context.Context, name string, ready bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := k.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Status.Conditions = nodeConditions(ready, metav1.Now())
		_, err = k.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
}

// nodeChanged follows the not-ready annotation, and answers the node
// controller marking a live node Unknown (e.g. after a Lease renewal was
// late on a busy machine) by posting Ready again, as a kubelet would.
func (k *fakeKubelet) nodeChanged(obj any) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	k.mu.Lock()
	st, mine := k.states[node.Name]
	adopted := !mine && node.Labels[playLabel] == "true"
	if adopted {
		// Pod IPs 10.244.<index>.x: after the registered nodes, within an octet.
		// States are never removed, so the nodes adopted so far are the rest.
		played := len(k.states) - k.shape.count
		st = &nodeState{index: k.shape.count + 1 + played%(250-k.shape.count), nextIP: 2}
		k.states[node.Name] = st
		mine = true
	}
	if !mine || st.deleted {
		k.mu.Unlock()
		return
	}
	wantNotReady := node.Annotations[notReadyAnnotation] == "true"
	changed := wantNotReady != st.notReady
	st.notReady = wantNotReady
	k.mu.Unlock()

	ready := nodeReady(node)
	switch {
	case adopted:
		k.log.Printf("node %s: %s=true, playing its kubelet", node.Name, playLabel)
		k.enqueueNodePods(node.Name)
	case changed && wantNotReady:
		k.log.Printf("node %s: %s=true, reporting NotReady and stopping heartbeats", node.Name, notReadyAnnotation)
	case changed:
		k.log.Printf("node %s: %s removed, reporting Ready and resuming", node.Name, notReadyAnnotation)
		k.enqueueNodePods(node.Name)
	case !wantNotReady && ready:
		return
	case wantNotReady && !ready:
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := k.postNodeStatus(ctx, node.Name, !wantNotReady); err != nil {
			k.log.Printf("node %s: posting status: %v", node.Name, err)
		}
		if !wantNotReady {
			k.renewLease(ctx, node.Name)
		}
	}()
}

// nodeDeleted: a deleted Node stays deleted (no re-registration), so that
// pod garbage collection of its orphaned pods can be tested.
func (k *fakeKubelet) nodeDeleted(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	node, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if st, mine := k.states[node.Name]; mine && !st.deleted {
		st.deleted = true
		k.log.Printf("node %s deleted: no more heartbeats or pod updates for it", node.Name)
	}
}

func nodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// heartbeat renews the Leases of live nodes every 10s, as kubelets do.
func (k *fakeKubelet) heartbeat(ctx context.Context) {
	ticker := time.NewTicker(leaseRenewInterval)
	defer ticker.Stop()
	for {
		for _, name := range k.liveNodes() {
			k.renewLease(ctx, name)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

func (k *fakeKubelet) liveNodes() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var names []string
	for name, st := range k.states {
		if !st.notReady && !st.deleted {
			names = append(names, name)
		}
	}
	return names
}

// renewLease creates or renews the node's Lease. Like the kubelet, it keeps
// the Lease it last wrote and updates that (one request per renewal); only a
// conflict or a missing Lease costs a read. The Lease is owned by the Node
// (as the kubelet sets it), so deleting the Node removes it.
func (k *fakeKubelet) renewLease(ctx context.Context, name string) {
	leases := k.client.CoordinationV1().Leases(leaseNamespace)
	k.mu.Lock()
	cached := k.leases[name]
	k.mu.Unlock()
	now := metav1.NowMicro()
	var lease *coordinationv1.Lease
	var err error
	if cached != nil {
		renewed := cached.DeepCopy()
		renewed.Spec.RenewTime = &now
		lease, err = leases.Update(ctx, renewed, metav1.UpdateOptions{})
	}
	if cached == nil || apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		lease, err = k.readOrCreateLease(ctx, name, now)
	}
	if err != nil {
		if ctx.Err() == nil {
			k.log.Printf("lease %s: %v", name, err)
		}
		lease = nil
	}
	k.mu.Lock()
	k.leases[name] = lease
	k.mu.Unlock()
}

func (k *fakeKubelet) readOrCreateLease(ctx context.Context, name string, now metav1.MicroTime) (*coordinationv1.Lease, error) {
	leases := k.client.CoordinationV1().Leases(leaseNamespace)
	lease, err := leases.Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		lease.Spec.RenewTime = &now
		return leases.Update(ctx, lease, metav1.UpdateOptions{})
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading: %w", err)
	}
	node, err := k.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading its node: %w", err)
	}
	return leases.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: leaseNamespace,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: name, UID: node.UID,
			}},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(name),
			LeaseDurationSeconds: ptr.To[int32](leaseDuration),
			RenewTime:            &now,
		},
	}, metav1.CreateOptions{})
}

func (k *fakeKubelet) enqueuePod(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	k.queue.Add(key)
}

func (k *fakeKubelet) enqueueNodePods(node string) {
	objs, err := k.pods.GetIndexer().ByIndex(podIndexByNode, node)
	if err != nil {
		return
	}
	for _, obj := range objs {
		k.enqueuePod(obj)
	}
}

func (k *fakeKubelet) processNext(ctx context.Context) bool {
	key, quit := k.queue.Get()
	if quit {
		return false
	}
	defer k.queue.Done(key)
	if err := k.syncPod(ctx, key); err != nil {
		if ctx.Err() != nil {
			return false
		}
		k.log.Printf("pod %s: %v (retrying)", key, err)
		k.queue.AddRateLimited(key)
		return true
	}
	k.queue.Forget(key)
	return true
}

// podAction is what a kubelet does next with a pod bound to its node.
type podAction int

const (
	podNothing        podAction = iota
	podStart                    // report it Running and Ready
	podFinishDeletion           // its containers are "stopped": remove it
	podPullBackOff              // an image cannot be pulled: report the back-off
)

// nextPodAction decides from the pod alone. Pods already terminal (Failed,
// Succeeded: e.g. an eviction written by a test) are left as they are;
// the real kubelet does not restart a terminal pod either.
func nextPodAction(pod *corev1.Pod) podAction {
	if pod.DeletionTimestamp != nil {
		return podFinishDeletion
	}
	switch pod.Status.Phase {
	case corev1.PodSucceeded, corev1.PodFailed:
		return podNothing
	case corev1.PodRunning:
		if podConditionTrue(pod, corev1.PodReady) && pod.Status.PodIP != "" {
			return podNothing
		}
	}
	if image := unpullableImage(pod); image != "" {
		if backingOff(pod) {
			return podNothing
		}
		return podPullBackOff
	}
	return podStart
}

// unpullableImage is the first container image whose registry host is under
// .invalid (RFC 2606): its name lookup fails everywhere, so tests use it to
// make the kubelet fail to pull on demand.
func unpullableImage(pod *corev1.Pod) string {
	for _, c := range pod.Spec.Containers {
		if host := registryHost(c.Image); strings.HasSuffix(host, ".invalid") {
			return c.Image
		}
	}
	return ""
}

// registryHost is the registry an image reference names (host[:port]/path),
// or "" when it names none (docker.io's short form).
func registryHost(image string) string {
	first, _, found := strings.Cut(image, "/")
	if !found {
		return ""
	}
	host, _, _ := strings.Cut(first, ":")
	if !strings.Contains(host, ".") && host != "localhost" {
		return ""
	}
	return host
}

// backingOff reports whether the back-off is already reported (so the status
// is written once, not on every event).
func backingOff(pod *corev1.Pod) bool {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Waiting != nil && cs.State.Waiting.Reason == "ImagePullBackOff" {
			return true
		}
	}
	return false
}

func podConditionTrue(pod *corev1.Pod, t corev1.PodConditionType) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (k *fakeKubelet) syncPod(ctx context.Context, key string) error {
	obj, exists, err := k.pods.GetIndexer().GetByKey(key)
	if err != nil || !exists {
		return err
	}
	pod := obj.(*corev1.Pod)
	k.mu.Lock()
	st, mine := k.states[pod.Spec.NodeName]
	alive := mine && !st.notReady && !st.deleted
	k.mu.Unlock()
	if !alive {
		return nil
	}
	switch nextPodAction(pod) {
	case podFinishDeletion:
		// The uid precondition keeps a same-named successor safe.
		err := k.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0),
			Preconditions:      &metav1.Preconditions{UID: ptr.To(pod.UID)},
		})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return err
	case podPullBackOff:
		waiting := pod.DeepCopy()
		waiting.Status = pullBackOffStatus(pod, "127.0.0.1", unpullableImage(pod), metav1.Now())
		_, err := k.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, waiting, metav1.UpdateOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	case podStart:
		started := pod.DeepCopy()
		started.Status = runningStatus(pod, "127.0.0.1", k.allocateIP(pod.Spec.NodeName, pod.Status.PodIP), metav1.Now())
		_, err := k.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, started, metav1.UpdateOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	return nil
}

// allocateIP keeps a pod's IP once it has one; otherwise hands out the next
// address of the node's /24.
func (k *fakeKubelet) allocateIP(node, current string) string {
	if current != "" {
		return current
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	st := k.states[node]
	ip := fmt.Sprintf("10.244.%d.%d", st.index, st.nextIP)
	st.nextIP++
	if st.nextIP > 254 {
		st.nextIP = 2
	}
	return ip
}

// runningStatus is the status a kubelet reports once every container of
// the pod has started: phase Running, the kubelet's conditions True (other
// writers' conditions, like PodScheduled, kept), init containers completed.
func runningStatus(pod *corev1.Pod, hostIP, podIP string, now metav1.Time) corev1.PodStatus {
	st := *pod.Status.DeepCopy()
	st.Phase = corev1.PodRunning
	st.HostIP = hostIP
	st.HostIPs = []corev1.HostIP{{IP: hostIP}}
	st.PodIP = podIP
	st.PodIPs = []corev1.PodIP{{IP: podIP}}
	if st.StartTime == nil {
		st.StartTime = &now
	}
	for _, t := range []corev1.PodConditionType{
		corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady,
	} {
		st.Conditions = setPodCondition(st.Conditions, t, now)
	}
	st.InitContainerStatuses = nil
	for _, c := range pod.Spec.InitContainers {
		st.InitContainerStatuses = append(st.InitContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: "fake://" + c.Image,
			ContainerID: containerID(pod.UID, c.Name), Ready: true, Started: ptr.To(false),
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now,
				ContainerID: containerID(pod.UID, c.Name),
			}},
		})
	}
	st.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: "fake://" + c.Image,
			ContainerID: containerID(pod.UID, c.Name), Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	return st
}

// pullBackOffStatus is what a kubelet reports while it backs off pulling
// image: the pod stays Pending and not Ready, its containers wait with
// ImagePullBackOff and the runtime's error.
func pullBackOffStatus(pod *corev1.Pod, hostIP, image string, now metav1.Time) corev1.PodStatus {
	st := *pod.Status.DeepCopy()
	st.Phase = corev1.PodPending
	st.HostIP = hostIP
	st.HostIPs = []corev1.HostIP{{IP: hostIP}}
	if st.StartTime == nil {
		st.StartTime = &now
	}
	var names []string
	for _, c := range pod.Spec.Containers {
		names = append(names, c.Name)
	}
	unready := fmt.Sprintf("containers with unready status: [%s]", strings.Join(names, " "))
	for _, t := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized} {
		st.Conditions = setPodCondition(st.Conditions, t, now)
	}
	for _, t := range []corev1.PodConditionType{corev1.ContainersReady, corev1.PodReady} {
		st.Conditions = setPodConditionFalse(st.Conditions, t, "ContainersNotReady", unready, now)
	}
	message := fmt.Sprintf("Back-off pulling image %q: ErrImagePull: failed to pull and unpack image %q: "+
		"failed to resolve reference %q: dial tcp: lookup %s: no such host", image, image, image, registryHost(image))
	st.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, Started: ptr.To(false),
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
				Reason: "ImagePullBackOff", Message: message,
			}},
		})
	}
	return st
}

// setPodConditionFalse sets condition t to False with a reason and message.
func setPodConditionFalse(conds []corev1.PodCondition, t corev1.PodConditionType, reason, message string, now metav1.Time) []corev1.PodCondition {
	for i := range conds {
		if conds[i].Type == t {
			if conds[i].Status != corev1.ConditionFalse {
				conds[i].LastTransitionTime = now
			}
			conds[i].Status, conds[i].Reason, conds[i].Message = corev1.ConditionFalse, reason, message
			return conds
		}
	}
	return append(conds, corev1.PodCondition{Type: t, Status: corev1.ConditionFalse, Reason: reason, Message: message, LastTransitionTime: now})
}

func containerID(uid types.UID, name string) string {
	return fmt.Sprintf("fake://%s-%s", uid, name)
}

// setPodCondition sets condition t to True, keeping its transition time when
// it already was True.
func setPodCondition(conds []corev1.PodCondition, t corev1.PodConditionType, now metav1.Time) []corev1.PodCondition {
	for i := range conds {
		if conds[i].Type == t {
			if conds[i].Status != corev1.ConditionTrue {
				conds[i].Status = corev1.ConditionTrue
				conds[i].LastTransitionTime = now
				conds[i].Reason = ""
				conds[i].Message = ""
			}
			return conds
		}
	}
	return append(conds, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
}
