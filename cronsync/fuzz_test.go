package cronsync

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

func equalTriggers(a, b *Triggers) bool { return reflect.DeepEqual(a, b) }

// FuzzParseTriggers: no input panics; every refusal is a *TriggerError; every
// accepted file writes back (MarshalJSON) to a file that parses to the same
// value, with the same fingerprint.
func FuzzParseTriggers(f *testing.F) {
	seeds := [][]byte{
		nil,
		[]byte(`{}`),
		[]byte(`{"triggers":[]}`),
		file(cronJSON(`"id":"nightly","pattern":"0 3 * * *"`, okRun)),
		file(cronJSON(`"id":"s","pattern":"*/5 * * * * *","tz":"Asia/Tokyo"`, `{"kind":"local","folder":"/a","command":"c","secrets":{"A":"b"},"models":["m"],"maxTurns":3}`)),
		file(`{"on":{"type":"label","any":["<x>"]},"run":{"kind":"github","flow":"fix"}}`),
		file(cronJSON(`"id":"a:b","patern":"61 * * * *","tz":"Local"`, `{"kind":"github","folder":"rel"}`)),
		file(`{"on":{"type":"cron","id":"a","id":"a"}}`),
		[]byte("{\"triggers\":[\"\xff\x00\"]}"),
		[]byte(`{"triggers":[{"on":{"type":"cron","id":"x\u2028","pattern":"0 0 L * *"},"run":{"kind":"local","folder":"/\u00e9","flow":"f","task":"\ud800"}}]}`),
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := ParseTriggers(data)
		if err != nil {
			if tr != nil {
				t.Fatal("a value returned with an error")
			}
			if !errors.Is(err, ErrInvalidTriggers) {
				t.Fatalf("refusal without ErrInvalidTriggers: %v", err)
			}
			return
		}
		if tr.Cron == nil {
			t.Fatal("accepted file with a nil cron set")
		}
		out, err := json.Marshal(tr)
		if err != nil {
			t.Fatalf("MarshalJSON: %v", err)
		}
		again, err := ParseTriggers(out)
		if err != nil {
			t.Fatalf("written-back file refused: %v\n%s", err, out)
		}
		if !equalTriggers(tr, again) {
			t.Fatalf("re-parse differs:\n%+v\n%+v", tr, again)
		}
		fp1, err1 := Fingerprint(tr.Cron, "UTC")
		fp2, err2 := Fingerprint(again.Cron, "UTC")
		if err1 != nil || err2 != nil || fp1 != fp2 {
			t.Fatalf("fingerprints %q %v / %q %v", fp1, err1, fp2, err2)
		}
		for _, e := range tr.Cron {
			if JobData(e) == nil {
				t.Fatalf("accepted entry %q has no job data", e.SchedulerID)
			}
		}
	})
}
