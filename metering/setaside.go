package metering

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Lines the writer passes over are set aside, not dropped: a record the database refuses
// for good goes to refused.jsonl, a line that is not a record to damaged.jsonl, each once,
// for an operator to look at.

// setAside puts a record the database refused in the dead-letter file, once, and moves
// the position past it. If moving the position fails, the record is read again later
// and found already set aside.
func (l *Ledger) setAside(ctx context.Context, records []Record, lines [][]byte, upTo int64, cause error) error {
	if len(records) == 1 {
		added, err := l.deadLetter(records[0].RequestID, lines[0])
		if err != nil {
			return err
		}
		if added {
			l.log("a usage record the database refuses was set aside in "+filepath.Join(l.dir, deadLetterFile)+
				" (request "+records[0].RequestID+")", cause)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	if err := l.sink.WriteUsage(wctx, l.id, upTo, nil); err != nil {
		return err
	}
	l.advance(upTo)
	return nil
}

// deadLetterFile keeps records the database refused for good, for an operator to look at.
const deadLetterFile = "refused.jsonl"

// deadLetter appends a refused record's journal line to the dead-letter file unless its
// request id is already there, so that the file holds each refused request once and an
// operator re-importing it counts nothing twice. It reports whether it added the line.
func (l *Ledger) deadLetter(requestID string, line []byte) (bool, error) {
	path := filepath.Join(l.dir, deadLetterFile)
	if l.refusedIDs == nil {
		l.refusedIDs = map[string]bool{}
		if b, err := os.ReadFile(path); err == nil {
			for _, prev := range bytes.Split(b, []byte{'\n'}) {
				var r struct {
					RequestID string `json:"request_id"`
				}
				if json.Unmarshal(prev, &r) == nil && r.RequestID != "" {
					l.refusedIDs[r.RequestID] = true
				}
			}
		} else if !errors.Is(err, os.ErrNotExist) {
			l.refusedIDs = nil
			return false, err
		}
	}
	if l.refusedIDs[requestID] {
		return false, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return false, err
	}
	defer f.Close()
	if _, err := f.Write(line); err != nil {
		return false, err
	}
	l.refusedIDs[requestID] = true
	return true, nil
}

// damagedFile keeps the journal lines that are not usage records (bytes damaged on
// disk), each as a JSON line {"position": where it starts in the journal, "bytes": the
// line, base64}, for an operator to look at: the ledger passes over them rather than
// stop, but does not drop them unseen.
const damagedFile = "damaged.jsonl"

// damagedLine is one entry of the damaged-lines file.
type damagedLine struct {
	Position int64  `json:"position"`
	Bytes    []byte `json:"bytes"`
	cause    error
}

// setAsideDamaged copies damaged journal lines to the damaged-lines file, each once
// (by journal position, across restarts too), and reports each line it adds.
func (l *Ledger) setAsideDamaged(damaged []damagedLine) error {
	if len(damaged) == 0 {
		return nil
	}
	path := filepath.Join(l.dir, damagedFile)
	if l.damagedAt == nil {
		seen := map[int64]bool{}
		if b, err := os.ReadFile(path); err == nil {
			for _, prev := range bytes.Split(b, []byte{'\n'}) {
				var d damagedLine
				if json.Unmarshal(prev, &d) == nil && d.Bytes != nil {
					seen[d.Position] = true
				}
			}
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		l.damagedAt = seen
	}
	var add []byte
	var added []damagedLine
	for _, d := range damaged {
		if l.damagedAt[d.Position] {
			continue
		}
		entry, err := json.Marshal(d)
		if err != nil {
			return err
		}
		add = append(append(add, entry...), '\n')
		added = append(added, d)
	}
	if len(add) == 0 {
		return nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(add)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	for _, d := range added {
		l.damagedAt[d.Position] = true
		l.log(fmt.Sprintf("a damaged journal line (%d bytes at position %d) was set aside in %s; the records after it go on",
			len(d.Bytes), d.Position, path), d.cause)
	}
	return nil
}
