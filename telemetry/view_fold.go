package telemetry

import "github.com/chaperone-dev/chaperone/event"

// ViewFold folds routine file reads for a view of records read in order
// (chaperone events, sessions show, demo), as the audit log folds them: a
// file_reads record stays one record, and a run of routine file records
// (RoutineRecord: a log written with audit.file_reads: all holds them) of
// one process of one session becomes one file_reads record that counts
// them. With All set nothing is folded, and each file of a file_reads
// record becomes a file record of its own. The session's working tree and
// home come from its session_start record, when it was read.
//
// The zero ViewFold folds. It is not safe for concurrent use.
type ViewFold struct {
	All bool

	places map[string][2]string // session → workdir, home
	run    *readFold
	first  Record // the run's first read
}

// Note learns a session's working tree and home from its session_start
// record r, which is not to be shown (a view filtered out); Add learns
// them from the records it is given.
func (v *ViewFold) Note(r Record) {
	if r.Kind == event.KindSessionStart && (r.Workdir != "" || r.Home != "") {
		if v.places == nil {
			v.places = map[string][2]string{}
		}
		v.places[r.Session] = [2]string{r.Workdir, r.Home}
	}
}

// Add takes the next record and passes what is to be shown of it, and of
// a run it ends, to emit; an error from emit is returned as is.
func (v *ViewFold) Add(r Record, emit func(Record) error) error {
	v.Note(r)
	if v.All {
		if r.Kind != KindFileReads {
			return emit(r)
		}
		for _, e := range r.Events() {
			fr := RecordOf(e)
			fr.ProcessID, fr.PID = r.ProcessID, r.PID
			if err := emit(fr); err != nil {
				return err
			}
		}
		return nil
	}
	if r.Kind == KindProcess {
		return emit(r) // says nothing of a run
	}
	pl := v.places[r.Session]
	if r.Kind != event.KindFile || !RoutineRecord(&r, pl[0], pl[1]) {
		if err := v.Flush(emit); err != nil {
			return err
		}
		return emit(r)
	}
	pid := r.PID
	if r.Process != nil {
		pid = r.Process.PID
	}
	if v.run != nil && (v.run.session != r.Session || v.run.pid != pid) {
		if err := v.Flush(emit); err != nil {
			return err
		}
	}
	if v.run == nil {
		v.run = &readFold{session: r.Session, pid: pid, first: r.Time, byDir: make(map[dirKey]*dirFold)}
		v.first = r
	}
	v.run.add(r.Path, event.Verdict{Action: r.Verdict, DecidedBy: r.DecidedBy, Rule: r.Rule}, r.Time)
	return nil
}

// Flush passes the run of routine reads being folded, if any, to emit.
func (v *ViewFold) Flush(emit func(Record) error) error {
	f := v.run
	if f == nil {
		return nil
	}
	v.run = nil
	if f.count == 1 {
		return emit(v.first) // nothing to fold
	}
	r := f.record()
	r.Process, r.ProcessID = v.first.Process, v.first.ProcessID
	return emit(r)
}

// FoldView is ViewFold over recs: the records to show, in order.
func FoldView(recs []Record, all bool) []Record {
	v := ViewFold{All: all}
	out := make([]Record, 0, len(recs))
	emit := func(r Record) error { out = append(out, r); return nil }
	for _, r := range recs {
		v.Add(r, emit)
	}
	v.Flush(emit)
	return out
}
