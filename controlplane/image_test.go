package main

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeTree makes a small root filesystem; files are written in the given
// order, so two trees can differ in creation order and times only.
func writeTree(t *testing.T, dir string, order []string, mtime time.Time) {
	t.Helper()
	files := map[string]string{
		"usr/local/bin/jumppod":         "#!binary\n",
		"usr/share/jumppod/policy.wasm": "\x00asm",
		"etc/passwd":                    "nonroot:x:65532:65532::/home/nonroot:/sbin/nologin\n",
	}
	for _, name := range order {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(files[name]), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
}

func archive(t *testing.T, opts imageOptions) (string, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "image.oci.tar")
	digest, err := writeOCIArchive(opts, out)
	if err != nil {
		t.Fatal(err)
	}
	return digest, out
}

func TestTheSameFilesWrittenAtAnotherTimeInAnotherOrderGiveTheSameDigest(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	writeTree(t, a, []string{"usr/local/bin/jumppod", "usr/share/jumppod/policy.wasm", "etc/passwd"}, time.Unix(1e9, 0))
	writeTree(t, b, []string{"etc/passwd", "usr/share/jumppod/policy.wasm", "usr/local/bin/jumppod"}, time.Unix(2e9, 0))
	for _, gz := range []bool{false, true} {
		opts := imageOptions{ref: "localhost/jumppod/jumppod:test", entrypoint: []string{"/usr/local/bin/jumppod"},
			labels: []string{"org.opencontainers.image.revision=abc"}, user: "65532:65532", owner: "0:0", epoch: 1700000000, gzip: gz}
		opts.rootfs = a
		first, _ := archive(t, opts)
		opts.rootfs = b
		second, _ := archive(t, opts)
		if first != second {
			t.Errorf("gzip=%v: %s then %s for the same files", gz, first, second)
		}
	}
}

func TestAChangedFileOrLabelChangesTheDigest(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, []string{"usr/local/bin/jumppod", "usr/share/jumppod/policy.wasm", "etc/passwd"}, time.Unix(1e9, 0))
	opts := imageOptions{rootfs: dir, ref: "localhost/jumppod/jumppod:test", owner: "0:0"}
	before, _ := archive(t, opts)
	opts.labels = []string{"org.opencontainers.image.revision=def"}
	labelled, _ := archive(t, opts)
	if err := os.WriteFile(filepath.Join(dir, "etc/passwd"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	changed, _ := archive(t, opts)
	if before == labelled || labelled == changed {
		t.Errorf("digests %s, %s, %s: a change must show", before, labelled, changed)
	}
}

// TestTheLayerRecordsTheGivenOwnerAndTimeAndTheConfigTheUserAndLabels reads
// the archive back as a registry client would: index, manifest, config, layer.
func TestTheLayerRecordsTheGivenOwnerAndTimeAndTheConfigTheUserAndLabels(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, []string{"usr/local/bin/jumppod", "usr/share/jumppod/policy.wasm", "etc/passwd"}, time.Unix(1e9, 0))
	_, out := archive(t, imageOptions{rootfs: dir, ref: "localhost/jumppod/jumppod:1", owner: "0:0", epoch: 1700000000, gzip: true,
		user: "65532:65532", labels: []string{"org.opencontainers.image.version=1"}, env: []string{"JUMPPOD_POLICY_WASM=/usr/share/jumppod/policy.wasm"}})
	blobs := readArchive(t, out)
	var index struct {
		Manifests []struct{ Digest string } `json:"manifests"`
	}
	mustJSON(t, blobs["index.json"], &index)
	var manifest struct {
		Config      struct{ Digest string }
		Layers      []struct{ Digest, MediaType string }
		Annotations map[string]string
	}
	mustJSON(t, blobs[blobPath(index.Manifests[0].Digest)], &manifest)
	if manifest.Annotations["org.opencontainers.image.version"] != "1" || manifest.Layers[0].MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" {
		t.Errorf("manifest %+v", manifest)
	}
	var config struct {
		Created string
		Config  struct {
			User   string
			Env    []string
			Labels map[string]string
		}
	}
	mustJSON(t, blobs[blobPath(manifest.Config.Digest)], &config)
	if config.Config.User != "65532:65532" || config.Config.Labels["org.opencontainers.image.version"] != "1" ||
		!strings.Contains(strings.Join(config.Config.Env, " "), "JUMPPOD_POLICY_WASM=/usr/share/jumppod/policy.wasm") ||
		config.Created != "2023-11-14T22:13:20Z" {
		t.Errorf("config %+v", config)
	}
	zr, err := gzip.NewReader(strings.NewReader(string(blobs[blobPath(manifest.Layers[0].Digest)])))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
		if hdr.Uid != 0 || hdr.Gid != 0 || hdr.ModTime.Unix() != 1700000000 {
			t.Errorf("%s: owner %d:%d, time %v", hdr.Name, hdr.Uid, hdr.Gid, hdr.ModTime)
		}
	}
	want := "etc/ etc/passwd usr/ usr/local/ usr/local/bin/ usr/local/bin/jumppod usr/share/ usr/share/jumppod/ usr/share/jumppod/policy.wasm"
	if strings.Join(names, " ") != want {
		t.Errorf("layer holds %q, want %q", strings.Join(names, " "), want)
	}
}

func TestABadLabelOrOwnerIsRefusedByName(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		opts imageOptions
		want string
	}{
		{imageOptions{rootfs: dir, ref: "x:1", labels: []string{"novalue"}}, `--label "novalue": want KEY=VALUE`},
		{imageOptions{rootfs: dir, ref: "x:1", owner: "root"}, `--owner "root": want UID:GID`},
	} {
		_, err := writeOCIArchive(c.opts, filepath.Join(t.TempDir(), "x.tar"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want %q", err, c.want)
		}
	}
}

func blobPath(digest string) string { return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:") }

func mustJSON(t *testing.T, data []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%v in %s", err, data)
	}
}

func readArchive(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	blobs := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return blobs
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		blobs[hdr.Name] = data
	}
}
