// Command buildtool builds the Switchyard binary: Caddy plus our modules,
// as described by the build manifest xcaddy.json.
//
//	go run ./internal/buildtool [-manifest xcaddy.json] [-n]
//
// It turns the manifest into one `go tool xcaddy build` command, prints it,
// and runs it with xcaddy's output streamed through. Every version is exact:
// the module proxy refuses some version listings (xcaddy's own, for one), so
// nothing here may ask for "latest".
//
// Manifest keys (paths are relative to the manifest's folder):
//
//	caddy_version   exact Caddy release tag, e.g. "v2.11.9"
//	output          path of the binary to write, e.g. "bin/switchyard"
//	plugins[]       modules linked into the binary, each with:
//	  module        Go module path
//	  dir           local checkout of that module (becomes a replace), or
//	  version       exact version to fetch (exactly one of dir and version)
//	  packages      packages of the module to link in; default: the module root
//
// Rebuilds are fast because the Go build cache is shared: xcaddy's default
// flags (-trimpath, -ldflags "-w -s", fixed tags) give the same cache keys on
// every run even though xcaddy writes its main package to a new temporary
// folder each time, so only changed packages compile and an unchanged binary
// is not even relinked. Setting XCADDY_GO_BUILD_FLAGS replaces those defaults.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

type manifest struct {
	CaddyVersion string   `json:"caddy_version"`
	Output       string   `json:"output"`
	Plugins      []plugin `json:"plugins"`
}

type plugin struct {
	Module   string   `json:"module"`
	Dir      string   `json:"dir,omitempty"`
	Version  string   `json:"version,omitempty"`
	Packages []string `json:"packages,omitempty"`
}

func main() {
	manifestPath := flag.String("manifest", "xcaddy.json", "build manifest to read")
	dryRun := flag.Bool("n", false, "print the xcaddy command without running it")
	flag.Parse()
	if err := run(*manifestPath, *dryRun); err != nil {
		fmt.Fprintln(os.Stderr, "buildtool:", err)
		os.Exit(1)
	}
}

func run(manifestPath string, dryRun bool) error {
	m, err := readManifest(manifestPath)
	if err != nil {
		return err
	}
	root, err := filepath.Abs(filepath.Dir(manifestPath))
	if err != nil {
		return err
	}
	args, err := xcaddyArgs(m, root)
	if err != nil {
		return fmt.Errorf("%s: %w", manifestPath, err)
	}
	// The xcaddy version is the one go.mod pins with its tool directive.
	argv := append([]string{"go", "tool", "xcaddy"}, args...)
	fmt.Fprintln(os.Stderr, "buildtool:", shellQuote(argv))
	if dryRun {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(absPath(root, m.Output)), 0o755); err != nil {
		return err
	}

	start := time.Now()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = root
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	if cmd.Env, err = buildEnv(root); err != nil {
		return err
	}
	if err := runForwardingSignals(cmd); err != nil {
		return fmt.Errorf("xcaddy build failed: %w", err)
	}
	fmt.Fprintf(os.Stderr, "buildtool: built %s in %s\n", m.Output, time.Since(start).Round(100*time.Millisecond))
	return nil
}

// buildEnv is our environment with the local module cache put in front of
// the module proxy. xcaddy makes a new module for every build, and its
// `go get` then asks the proxy for the version list of every dependency
// (deprecation and retraction checks): about 7 seconds of network round
// trips per build. Served from the cache, that takes a second; anything
// not in the cache still comes from the proxy, which stays next in line.
func buildEnv(root string) ([]string, error) {
	cmd := exec.Command("go", "env", "-json", "GOMODCACHE", "GOPROXY")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go env: %w", err)
	}
	var goenv struct{ GOMODCACHE, GOPROXY string }
	if err := json.Unmarshal(out, &goenv); err != nil {
		return nil, fmt.Errorf("go env: %w", err)
	}
	env := os.Environ()
	if goenv.GOMODCACHE == "" || strings.HasPrefix(goenv.GOPROXY, "file://") {
		return env, nil
	}
	cache := (&url.URL{Scheme: "file", Path: filepath.ToSlash(filepath.Join(goenv.GOMODCACHE, "cache", "download"))}).String()
	return append(env, "GOPROXY="+cache+","+goenv.GOPROXY), nil
}

func readManifest(path string) (*manifest, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var m manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &m, nil
}

// xcaddyArgs checks the manifest and turns it into xcaddy build arguments.
func xcaddyArgs(m *manifest, root string) ([]string, error) {
	if err := checkExactVersion("caddy_version", m.CaddyVersion); err != nil {
		return nil, err
	}
	if m.Output == "" {
		return nil, errors.New("output is required")
	}
	args := []string{"build", m.CaddyVersion, "--output", absPath(root, m.Output)}
	for i, p := range m.Plugins {
		where := fmt.Sprintf("plugins[%d]", i)
		if p.Module == "" {
			return nil, fmt.Errorf("%s: module is required", where)
		}
		pkgs := p.Packages
		if len(pkgs) == 0 {
			pkgs = []string{p.Module}
		}
		for _, pkg := range pkgs {
			if pkg != p.Module && !strings.HasPrefix(pkg, p.Module+"/") {
				return nil, fmt.Errorf("%s: package %s is not inside module %s", where, pkg, p.Module)
			}
		}
		switch {
		case (p.Dir == "") == (p.Version == ""):
			return nil, fmt.Errorf("%s: set either dir (a local checkout) or version (an exact version)", where)
		case p.Dir != "":
			// xcaddy skips `go get` only for packages below a replaced
			// module; for the module root itself it would ask the proxy
			// for the newest version, which the proxy refuses.
			args = append(args, "--replace", p.Module+"="+absPath(root, p.Dir))
			for _, pkg := range pkgs {
				if pkg == p.Module {
					return nil, fmt.Errorf("%s: a local plugin must name its packages below %s", where, p.Module)
				}
				args = append(args, "--with", pkg)
			}
		default:
			if err := checkExactVersion(where+": version", p.Version); err != nil {
				return nil, err
			}
			for _, pkg := range pkgs {
				args = append(args, "--with", pkg+"@"+p.Version)
			}
		}
	}
	return args, nil
}

func checkExactVersion(what, v string) error {
	if v == "" || v == "latest" || !strings.HasPrefix(v, "v") {
		return fmt.Errorf("%s must be an exact version such as v1.2.3, got %q", what, v)
	}
	return nil
}

// runForwardingSignals runs cmd and waits for it, passing SIGINT and SIGTERM
// on to it, so that a signal sent to this process alone (a CI time limit,
// say) stops the build too instead of leaving it running.
func runForwardingSignals(cmd *exec.Cmd) error {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case err := <-done:
			return err
		case sig := <-sigs:
			_ = cmd.Process.Signal(sig)
		}
	}
}

func absPath(root, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(root, p)
}

func shellQuote(argv []string) string {
	quoted := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && !strings.ContainsAny(a, " \t\n'\"\\$`*?[]{}()<>|&;#~!") {
			quoted[i] = a
		} else {
			quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(quoted, " ")
}
