package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// child is one upstream component running as a child process of `up`, in a
// process group of its own so that everything it may start dies with it.
type child struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	logFile *os.File
	done    chan struct{} // closed when the process has exited
	exitErr error         // valid once done is closed
	// expected: its exit is meant (a real node's power cut), not a death.
	expected atomic.Bool
}

// startChild runs this same binary with the component's subcommand: the
// apiserver and scheduler install process-wide signal handlers that panic if
// installed twice, so each component gets its own process.
func startChild(dir, name string, args []string) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this executable: %w", err)
	}
	return startProgram(dir, name, self, append([]string{name}, args...))
}

// startProgram runs path with args as the component name, its output in
// logs/NAME.log.
func startProgram(dir, name, path string, args []string) (*child, error) {
	logPath := filepath.Join(dir, "logs", name+".log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	// Appended to: a component started again (a real node's boot) keeps
	// what it logged before; up removes the logs of an earlier run.
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Stdin = nil
	cmd.Dir = dir
	// Setpgid: teardown signals the whole group. Pdeathsig: if `up` itself is
	// killed with SIGKILL, the kernel still takes its children down.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	c := &child{name: name, logPath: logPath, cmd: cmd, logFile: logFile, done: make(chan struct{})}
	go func() {
		c.exitErr = cmd.Wait()
		logFile.Close()
		close(c.done)
	}()
	return c, nil
}

// expectExit marks the exit that follows as meant, not as a death.
func (c *child) expectExit() { c.expected.Store(true) }

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the child's process group, waits up to grace, then
// sends SIGKILL and waits for the process to be reaped.
func (c *child) stop(grace time.Duration) {
	if c.exited() {
		// The leader is gone; anything left in its group still gets killed.
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		return
	}
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(grace):
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.done
	}
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
}

// describeFailure names the component, its log and the log's last lines.
func describeFailure(name, logPath, reason string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s\n  log: %s\n", name, reason, logPath)
	tail := lastLines(logPath, 20)
	if tail == "" {
		b.WriteString("  (log is empty)\n")
		return b.String()
	}
	b.WriteString("  last lines:\n")
	for _, line := range strings.Split(tail, "\n") {
		b.WriteString("    " + line + "\n")
	}
	return b.String()
}

// lastLines returns the last n lines of a file, long lines cut to 400 bytes.
func lastLines(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	out := make([]string, 0, len(lines))
	for _, l := range lines {
		if len(l) > 400 {
			l = append(l[:400:400], []byte("...")...)
		}
		out = append(out, string(l))
	}
	return strings.TrimSpace(strings.Join(out, "\n"))
}
