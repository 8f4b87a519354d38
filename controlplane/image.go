package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ociArchiveCommand is `oci-archive`: it packs a root filesystem into an OCI
// image layout tarball of one layer, which `ctr images import` loads and
// `skopeo copy oci-archive:FILE docker://...` pushes. The real nodes' images
// (images/build.sh) and jumppod's own (image/build.sh) are made this way
// from local files, since nothing can be pulled from a registry here, and no
// daemon is needed. The same directory contents and flags give the same
// bytes: paths in order, one modification time (--epoch), owners by number.
func ociArchiveCommand(args []string) int {
	fs := flag.NewFlagSet("oci-archive", flag.ContinueOnError)
	var opts imageOptions
	fs.StringVar(&opts.rootfs, "rootfs", "", "directory holding the image's root filesystem")
	fs.StringVar(&opts.ref, "ref", "", "image reference, e.g. localhost/jumppod/sshd:bookworm")
	out := fs.String("out", "", "the OCI archive to write")
	fs.Var((*stringList)(&opts.entrypoint), "entrypoint", "the image's entrypoint, one word per flag")
	fs.Var((*stringList)(&opts.env), "env", "KEY=VALUE in the image's environment (repeatable; PATH is always set)")
	fs.Var((*stringList)(&opts.labels), "label", "KEY=VALUE label of the image, also a manifest annotation (repeatable)")
	fs.StringVar(&opts.user, "user", "", "the user the image runs as, UID[:GID]")
	fs.StringVar(&opts.owner, "owner", "", "UID:GID that owns every file of the layer (default: the files' own)")
	fs.Int64Var(&opts.epoch, "epoch", 0, "seconds since 1970: every file's modification time and the image's creation time (SOURCE_DATE_EPOCH)")
	fs.BoolVar(&opts.gzip, "gzip", false, "compress the layer (what a registry stores)")
	digestOut := fs.String("digest-file", "", "also write the image's manifest digest to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if opts.rootfs == "" || opts.ref == "" || *out == "" || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: jumppod-controlplane oci-archive --rootfs DIR --ref REF --out FILE [--entrypoint WORD]... [--env K=V]... [--label K=V]... [--user UID[:GID]] [--owner UID:GID] [--epoch SECONDS] [--gzip] [--digest-file FILE]")
		return 2
	}
	digest, err := writeOCIArchive(opts, *out)
	if err != nil {
		fmt.Fprintf(os.Stderr, "jumppod-controlplane oci-archive: %v\n", err)
		return 1
	}
	if *digestOut != "" {
		if err := os.WriteFile(*digestOut, []byte(digest+"\n"), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "jumppod-controlplane oci-archive: %v\n", err)
			return 1
		}
	}
	fmt.Printf("%s %s %s\n", *out, opts.ref, digest)
	return 0
}

// imageOptions: what goes into one image besides its files.
type imageOptions struct {
	rootfs, ref, user, owner string
	entrypoint, env, labels  []string
	epoch                    int64
	gzip                     bool
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, " ") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// keyValues parses KEY=VALUE words, naming the flag and the word it refuses.
func keyValues(flagName string, words []string) (map[string]string, error) {
	m := map[string]string{}
	for _, w := range words {
		k, v, ok := strings.Cut(w, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--%s %q: want KEY=VALUE", flagName, w)
		}
		m[k] = v
	}
	return m, nil
}

// parseOwner reads UID:GID.
func parseOwner(s string) (uid, gid int, err error) {
	u, g, ok := strings.Cut(s, ":")
	if ok {
		uid, err = strconv.Atoi(u)
		if err == nil {
			gid, err = strconv.Atoi(g)
		}
	}
	if !ok || err != nil || uid < 0 || gid < 0 {
		return 0, 0, fmt.Errorf("--owner %q: want UID:GID, two numbers", s)
	}
	return uid, gid, nil
}

// blob is one content-addressed file of the layout.
type blob struct {
	mediaType string
	digest    string
	size      int64
	data      []byte // nil for the layer, which is streamed from a file
	path      string
}

func (b blob) descriptor() map[string]any {
	return map[string]any{"mediaType": b.mediaType, "digest": b.digest, "size": b.size}
}

func jsonBlob(mediaType string, v any) (blob, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return blob{}, err
	}
	sum := sha256.Sum256(data)
	return blob{mediaType: mediaType, digest: "sha256:" + hex.EncodeToString(sum[:]), size: int64(len(data)), data: data}, nil
}

// writeOCIArchive writes the archive and returns the manifest's digest, the
// image's identity in a registry (`name@sha256:...`).
func writeOCIArchive(opts imageOptions, out string) (string, error) {
	labels, err := keyValues("label", opts.labels)
	if err != nil {
		return "", err
	}
	extraEnv, err := keyValues("env", opts.env)
	if err != nil {
		return "", err
	}
	tarOpts := tarOptions{mtime: time.Unix(opts.epoch, 0).UTC(), uid: -1, gid: -1}
	if opts.owner != "" {
		if tarOpts.uid, tarOpts.gid, err = parseOwner(opts.owner); err != nil {
			return "", err
		}
	}
	// The layer goes to a temporary file first: its digest is needed before
	// the archive that holds it can be written.
	layerFile, err := os.CreateTemp(filepath.Dir(out), ".layer-*.tar")
	if err != nil {
		return "", err
	}
	defer os.Remove(layerFile.Name())
	defer layerFile.Close()
	layerDigester, tarDigester := sha256.New(), sha256.New()
	counter := &countingWriter{w: io.MultiWriter(layerFile, layerDigester)}
	var tarSink io.Writer = counter
	var zw *gzip.Writer
	if opts.gzip {
		// No name and no time in the gzip header: the same tar, the same bytes.
		zw, _ = gzip.NewWriterLevel(counter, gzip.BestCompression)
		tarSink = zw
	}
	if err := tarDirectory(opts.rootfs, io.MultiWriter(tarSink, tarDigester), tarOpts); err != nil {
		return "", fmt.Errorf("packing %s: %w", opts.rootfs, err)
	}
	mediaType := "application/vnd.oci.image.layer.v1.tar"
	if zw != nil {
		if err := zw.Close(); err != nil {
			return "", err
		}
		mediaType += "+gzip"
	}
	diffID := "sha256:" + hex.EncodeToString(tarDigester.Sum(nil))
	layer := blob{mediaType: mediaType, digest: "sha256:" + hex.EncodeToString(layerDigester.Sum(nil)), size: counter.n, path: layerFile.Name()}

	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	for _, k := range sortedKeys(extraEnv) {
		env = append(env, k+"="+extraEnv[k])
	}
	imageConfig := map[string]any{"Entrypoint": opts.entrypoint, "Env": env}
	if opts.user != "" {
		imageConfig["User"] = opts.user
	}
	if len(labels) > 0 {
		imageConfig["Labels"] = labels
	}
	created := tarOpts.mtime.Format(time.RFC3339)
	config, err := jsonBlob("application/vnd.oci.image.config.v1+json", map[string]any{
		"created":      created,
		"architecture": "amd64",
		"os":           "linux",
		"config":       imageConfig,
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{diffID}},
		"history":      []map[string]any{{"created": created, "created_by": "jumppod-controlplane oci-archive"}},
	})
	if err != nil {
		return "", err
	}
	manifestBody := map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        config.descriptor(),
		"layers":        []any{layer.descriptor()},
	}
	if len(labels) > 0 {
		manifestBody["annotations"] = labels
	}
	manifest, err := jsonBlob("application/vnd.oci.image.manifest.v1+json", manifestBody)
	if err != nil {
		return "", err
	}
	manifestDesc := manifest.descriptor()
	manifestDesc["platform"] = map[string]string{"architecture": "amd64", "os": "linux"}
	// containerd names the imported image after io.containerd.image.name;
	// other tools read the OCI ref annotation.
	manifestDesc["annotations"] = map[string]string{
		"io.containerd.image.name":          opts.ref,
		"org.opencontainers.image.ref.name": opts.ref[strings.LastIndex(opts.ref, ":")+1:],
	}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{manifestDesc}})
	if err != nil {
		return "", err
	}

	tmp := out + ".partial"
	f, err := os.Create(tmp)
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	write := func(name string, size int64, r io.Reader) error {
		hdr := &tar.Header{Name: name, Mode: 0o644, Size: size, Typeflag: tar.TypeReg, ModTime: tarOpts.mtime}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := io.Copy(tw, r)
		return err
	}
	layout := []byte(`{"imageLayoutVersion":"1.0.0"}`)
	if err := write("oci-layout", int64(len(layout)), strings.NewReader(string(layout))); err != nil {
		return "", err
	}
	if err := write("index.json", int64(len(index)), strings.NewReader(string(index))); err != nil {
		return "", err
	}
	for _, b := range []blob{config, manifest} {
		if err := write("blobs/sha256/"+strings.TrimPrefix(b.digest, "sha256:"), b.size, strings.NewReader(string(b.data))); err != nil {
			return "", err
		}
	}
	if _, err := layerFile.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	if err := write("blobs/sha256/"+strings.TrimPrefix(layer.digest, "sha256:"), layer.size, layerFile); err != nil {
		return "", err
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return manifest.digest, os.Rename(tmp, out)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// tarOptions: what the layer records in place of what the files say, so
// that a copy made at another time (or by another user) packs alike.
type tarOptions struct {
	mtime    time.Time
	uid, gid int // -1: the file's own
}

// tarDirectory writes dir as a layer: paths relative to it in lexical order,
// owners, modes, symlinks, hard links (once, then as links) and device nodes
// kept; every time is opts.mtime.
func tarDirectory(dir string, w io.Writer, opts tarOptions) error {
	tw := tar.NewWriter(w)
	type inode struct{ dev, ino uint64 }
	seen := map[inode]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			hdr.Name += "/"
		}
		// Owners by number only: the image's /etc/passwd is not this machine's.
		hdr.Uname, hdr.Gname = "", ""
		if opts.uid >= 0 {
			hdr.Uid, hdr.Gid = opts.uid, opts.gid
		}
		hdr.ModTime, hdr.AccessTime, hdr.ChangeTime = opts.mtime, time.Time{}, time.Time{}
		hdr.Format = tar.FormatPAX
		if st, ok := statOf(info); ok && info.Mode().IsRegular() && st.nlink > 1 {
			key := inode{st.dev, st.ino}
			if first, ok := seen[key]; ok {
				hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
				return tw.WriteHeader(hdr)
			}
			seen[key] = hdr.Name
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		n, err := io.Copy(tw, f)
		if err == nil && n != hdr.Size {
			err = errors.New(path + " changed while it was packed")
		}
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

type statInfo struct{ dev, ino, nlink uint64 }

func statOf(info fs.FileInfo) (statInfo, bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return statInfo{}, false
	}
	return statInfo{dev: st.Dev, ino: st.Ino, nlink: st.Nlink}, true
}
