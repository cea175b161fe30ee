package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// chaperone ui serves the sessions of the log it is given, on the address
// it is given, to whoever opened its one-time URL only.
func TestUICommand(t *testing.T) {
	w := newWorld(t)
	mustSucceed(t, w.run("true"))
	id := w.sessionStart().Session

	link := w.startUI(t, "127.0.39.1:0")
	base := link[:strings.Index(link, "/?")]

	get := func(c *http.Client, url string) (int, []byte) {
		t.Helper()
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if code, _ := get(http.DefaultClient, base+"/api/sessions"); code != http.StatusUnauthorized {
		t.Errorf("without the token: status %d, want 401", code)
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	if code, b := get(c, link); code != http.StatusOK || !strings.Contains(string(b), "<html") {
		t.Fatalf("the URL: status %d: %.200s", code, b)
	}
	code, b := get(c, base+"/api/sessions")
	if code != http.StatusOK {
		t.Fatalf("sessions: status %d: %s", code, b)
	}
	var list struct {
		Sessions []struct {
			ID      string `json:"id"`
			Running bool   `json:"running"`
		} `json:"sessions"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Sessions) != 1 || list.Sessions[0].ID != id || list.Sessions[0].Running {
		t.Errorf("sessions %s, want the one ended session %s", b, id)
	}
	// The token was good once.
	if code, _ := get(http.DefaultClient, link); code != http.StatusUnauthorized {
		t.Errorf("the URL a second time: status %d, want 401", code)
	}
}

// chaperone run --ui serves the live view while its session runs, which
// shows it running.
func TestRunUI(t *testing.T) {
	w := newWorld(t)
	goFile := filepath.Join(w.dir, "go")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "run", "--ui", "--ui-listen", "127.0.39.2:0", "--mode", "proxy", "--log", w.log, "--",
		"sh", "-c", `while [ ! -e "$1" ]; do sleep 0.05; done`, "sh", goFile)
	cmd.Env = baseEnv(w.dir)
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		os.WriteFile(goFile, nil, 0o600)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("chaperone run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("chaperone run still runs 30 s after its command was told to end")
			cmd.Process.Kill()
		}
	}()

	lines := bufio.NewScanner(errPipe)
	var link string
	for lines.Scan() {
		if l, ok := strings.CutPrefix(lines.Text(), "live view: "); ok {
			link = l
			break
		}
	}
	go io.Copy(io.Discard, errPipe)
	if !strings.HasPrefix(link, "http://127.0.39.2:") || !strings.Contains(link, "/?token=") {
		t.Fatalf("no live view line on stderr (got %q)", link)
	}
	base := link[:strings.Index(link, "/?")]
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	resp, err := c.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := c.Get(base + "/api/sessions")
		if err != nil {
			t.Fatal(err)
		}
		var list struct {
			Sessions []struct {
				Running bool `json:"running"`
			} `json:"sessions"`
		}
		err = json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Sessions) == 1 && list.Sessions[0].Running {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sessions %+v: want the one running session", list.Sessions)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
