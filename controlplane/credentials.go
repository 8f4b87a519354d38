package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// identity is one line of the apiserver's --token-auth-file.
type identity struct {
	name   string
	token  string
	groups []string
}

// Users every run has. The components get users of their own, so the audit
// log tells their requests apart from the tests'.
const (
	adminUser       = "admin"
	controllerUser  = "system:kube-controller-manager"
	schedulerUser   = "system:kube-scheduler"
	fakeKubeletUser = "jumppod:fake-kubelet"
	demoUser        = "demo"
	mastersGroup    = "system:masters"
	plainUserCount  = 40
	testerCount     = 64
)

func newIdentity(name string, groups ...string) identity {
	buf := make([]byte, 24)
	if _, err := rand.Read(buf); err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err))
	}
	return identity{name: name, token: hex.EncodeToString(buf), groups: groups}
}

// identities: admin and the fake kubelet are in system:masters; the
// controller manager and scheduler rely on RBAC's bootstrap roles for their
// well-known user names, as kubeadm clusters do; user-1..user-40 have no group
// beyond system:authenticated, so every right they have is one a test gave.
// tester-1..tester-64 and demo are in system:masters too: each is the identity
// of one test (or of the demo), so that the audit log tells its requests from
// every other test's and no test's grants reach another.
func identities() []identity {
	ids := []identity{
		newIdentity(adminUser, mastersGroup),
		newIdentity(controllerUser),
		newIdentity(schedulerUser),
		newIdentity(fakeKubeletUser, mastersGroup),
	}
	for i := 1; i <= plainUserCount; i++ {
		ids = append(ids, newIdentity(fmt.Sprintf("user-%d", i)))
	}
	for i := 1; i <= testerCount; i++ {
		ids = append(ids, newIdentity(fmt.Sprintf("tester-%d", i), mastersGroup))
	}
	return append(ids, newIdentity(demoUser, mastersGroup))
}

// tokenFile renders the static token file: token,user,uid,"group1,group2".
func tokenFile(ids []identity) []byte {
	var b strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&b, "%s,%s,%s", id.token, id.name, id.name)
		if len(id.groups) > 0 {
			fmt.Fprintf(&b, ",\"%s\"", strings.Join(id.groups, ","))
		}
		b.WriteString("\n")
	}
	return []byte(b.String())
}

// writeKubeconfig writes a kubeconfig with one cluster, one user and one
// context, all named after the user, pointing at server with the CA inline.
func writeKubeconfig(path, server string, caPEM []byte, id identity) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["jumppod"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[id.name] = &clientcmdapi.AuthInfo{Token: id.token}
	cfg.Contexts[id.name] = &clientcmdapi.Context{Cluster: "jumppod", AuthInfo: id.name, Namespace: "default"}
	cfg.CurrentContext = id.name
	if err := writeFile(path, nil, 0o600); err != nil {
		return err
	}
	return clientcmd.WriteToFile(*cfg, path)
}

// kubeconfigPath is where a user's kubeconfig lives in the run directory.
func kubeconfigPath(dir string, id identity) string {
	switch {
	case id.name == adminUser:
		return filepath.Join(dir, "admin.kubeconfig")
	case strings.HasPrefix(id.name, "user-"), strings.HasPrefix(id.name, "tester-"), id.name == demoUser:
		return filepath.Join(dir, "users", id.name+".kubeconfig")
	default:
		name := strings.NewReplacer("system:", "", "jumppod:", "", ":", "-").Replace(id.name)
		return filepath.Join(dir, "components", name+".kubeconfig")
	}
}

// auditPolicy records every request twice, at level Metadata (verb, resource,
// user and user agent, without bodies): when it is received, written before it
// is handled (--audit-log-mode=blocking), so a client that holds its answer
// finds its request in the log already, which is what tests count; and when
// its response is complete, with the status code (watches: when they end).
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages:
  - ResponseStarted
rules:
  - level: Metadata
`
