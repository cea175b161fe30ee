package telemetry

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/chaperone-dev/chaperone/event"
)

// Filter selects records. Zero fields select everything.
type Filter struct {
	Session  string         // only this session (an id or a prefix of one)
	Kinds    []event.Kind   // only these kinds
	Verdicts []event.Action // only these verdicts
	Since    time.Time      // only records at or after this time
	Until    time.Time      // only records at or before this time
}

// Match reports whether r passes the filter. Process records (KindProcess)
// pass only a filter that names their kind; file_reads records pass one
// that names file.
func (f Filter) Match(r Record) bool {
	kind := r.Kind == KindProcess && slices.Contains(f.Kinds, KindProcess) ||
		r.Kind != KindProcess && (len(f.Kinds) == 0 || slices.Contains(f.Kinds, r.Kind) ||
			r.Kind == KindFileReads && slices.Contains(f.Kinds, event.KindFile))
	switch {
	case !kind,
		f.Session != "" && !strings.HasPrefix(r.Session, f.Session),
		len(f.Verdicts) > 0 && !slices.Contains(f.Verdicts, r.Verdict),
		!f.Since.IsZero() && r.Time.Before(f.Since),
		!f.Until.IsZero() && r.Time.After(f.Until):
		return false
	}
	return true
}

// ReadRecords calls fn for each record of r that f selects, in order, with
// the acting process of a record that names it by id (ProcessID) put back
// in Process from the process record that named it (see Filter.Match):
// a record whose process record is not in r keeps Process nil. Blank
// lines are skipped, and so are torn lines, the partial line a crash can
// leave: a last line without a newline that is not a record, and a line cut
// short inside its JSON object (which the writer ends with a newline when
// it reopens the log). Any other line that is not a record (bad JSON, not
// an object, no kind, an unknown verdict word, longer than MaxLineSize)
// stops reading with an error naming its line number. An error from fn is
// returned as is.
func ReadRecords(r io.Reader, f Filter, fn func(Record) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLineSize+1) // +1: the newline
	unterminated := false
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			return i + 1, data[:i], nil
		}
		if atEOF && len(data) > 0 {
			unterminated = true
			return len(data), data, nil
		}
		return 0, nil, nil
	})
	n := 0
	var procs processIndex
	for sc.Scan() {
		n++
		err := handleLine(sc.Bytes(), n, f, &procs, fn)
		if err != nil && unterminated && errors.As(err, new(lineError)) {
			return nil // the torn tail of a log cut by a crash
		}
		if err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("telemetry: audit log line %d: longer than %d bytes", n+1, MaxLineSize)
		}
		return fmt.Errorf("telemetry: read audit log: %w", err)
	}
	return nil
}

// lineError marks errors about the content of a line, as opposed to fn's.
type lineError struct{ err error }

func (e lineError) Error() string { return e.err.Error() }
func (e lineError) Unwrap() error { return e.err }

func handleLine(line []byte, n int, f Filter, procs *processIndex, fn func(Record) error) error {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return nil
	}
	r, err := parseRecord(line)
	if torn(err) {
		return nil
	}
	if err != nil {
		return lineError{fmt.Errorf("telemetry: audit log line %d: %w", n, err)}
	}
	procs.resolve(&r)
	if !f.Match(r) {
		return nil
	}
	return fn(r)
}

// torn reports whether err says a line's JSON object ended early: a line
// cut by a crash mid-write. Each line is written whole, so nothing else
// cuts one.
func torn(err error) bool {
	var se *json.SyntaxError
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &se) && se.Error() == "unexpected end of JSON input"
}

func parseRecord(line []byte) (Record, error) {
	var r Record
	if line[0] != '{' {
		return r, errors.New("not a JSON object")
	}
	if err := json.Unmarshal(line, &r); err != nil {
		return r, err
	}
	if r.Kind == "" {
		return r, errors.New("no kind")
	}
	return r, nil
}

// Follow reads the audit log at path like tail -f: it calls fn for every
// record f selects (with its process put back, as ReadRecords does), first those already in the file, then each as it is
// appended, checking every poll. A partially written last line waits until
// it is complete; a torn one (see ReadRecords) is skipped once the writer
// ends it. It waits for the file to appear, starts over when the file is
// truncated or replaced, and returns nil once ctx is done, or the first
// error from a bad line or fn.
func Follow(ctx context.Context, path string, f Filter, poll time.Duration, fn func(Record) error) error {
	if poll <= 0 {
		poll = 250 * time.Millisecond
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	wait := func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}

	var (
		file    *os.File
		info    os.FileInfo
		offset  int64
		n       int // lines consumed
		pending []byte
		// Kept when the file is replaced: its writer goes on naming
		// the processes it wrote before.
		procs processIndex
		buf   = make([]byte, 64<<10)
	)
	defer func() {
		if file != nil {
			file.Close()
		}
	}()
	for {
		if ctx.Err() != nil {
			return nil
		}
		if file == nil {
			fh, err := os.Open(path)
			if errors.Is(err, os.ErrNotExist) {
				if !wait() {
					return nil
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("telemetry: follow audit log: %w", err)
			}
			fi, err := fh.Stat()
			if err != nil {
				fh.Close()
				return fmt.Errorf("telemetry: follow audit log: %w", err)
			}
			file, info, offset, n, pending = fh, fi, 0, 0, pending[:0]
		}

		m, err := file.ReadAt(buf, offset)
		if m > 0 {
			offset += int64(m)
			pending = append(pending, buf[:m]...)
			for {
				i := bytes.IndexByte(pending, '\n')
				if i < 0 {
					break
				}
				n++
				if err := handleLine(pending[:i], n, f, &procs, fn); err != nil {
					return err
				}
				pending = pending[i+1:]
			}
			if len(pending) > MaxLineSize {
				return fmt.Errorf("telemetry: audit log line %d: longer than %d bytes", n+1, MaxLineSize)
			}
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("telemetry: follow audit log: %w", err)
		}

		// At the end: wait, then see whether the file was replaced or cut.
		if !wait() {
			return nil
		}
		cur, err := os.Stat(path)
		switch {
		case errors.Is(err, os.ErrNotExist), err == nil && !os.SameFile(info, cur):
			file.Close()
			file = nil // rotated: start on the new file
		case err != nil:
			return fmt.Errorf("telemetry: follow audit log: %w", err)
		case cur.Size() < offset:
			offset, n, pending = 0, 0, pending[:0] // truncated: read it again
		}
	}
}

// maxIndexed bounds the processes a reader remembers: past it, it forgets
// them all, and records of those processes keep only their ProcessID and
// PID.
const maxIndexed = 1 << 16

// processIndex remembers the process records read, by session and id.
type processIndex struct {
	m map[procKey]*Process
}

type procKey struct {
	session string
	id      int64
}

// resolve remembers r's process when r is a process record, and puts the
// process r names by id in r.Process when it knows it.
func (x *processIndex) resolve(r *Record) {
	switch {
	case r.ProcessID == 0:
	case r.Kind == KindProcess:
		if r.Process == nil {
			return
		}
		if x.m == nil || len(x.m) >= maxIndexed {
			x.m = make(map[procKey]*Process)
		}
		x.m[procKey{r.Session, r.ProcessID}] = r.Process
	case r.Process == nil:
		r.Process = x.m[procKey{r.Session, r.ProcessID}]
	}
}
