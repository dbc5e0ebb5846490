package console

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/switchyard-gw/switchyard/metering"
)

// maxFilterLen bounds a request log filter's value: ids and names are far shorter.
const maxFilterLen = 256

// listRequests pages the request log, newest first: ?key=<id>&project=<id>&model=<id>
// &candidate=<name>&status=<code>&since=<RFC 3339>&until=<RFC 3339>&limit=<n>
// &cursor=<the previous page's next>.
func (a *API) listRequests(w http.ResponseWriter, r *http.Request) {
	if a.Requests == nil {
		writeError(w, http.StatusServiceUnavailable, "this gateway's store keeps no request log")
		return
	}
	q, err := requestQuery(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	page, err := a.Requests.ListRequests(r.Context(), q)
	if errors.Is(err, metering.ErrBadCursor) {
		writeError(w, http.StatusBadRequest, "cursor: not a cursor this API gave")
		return
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, "the request log query failed; see the gateway's log")
		return
	}
	if page.Requests, err = a.reachRequests(r.Context(), page.Requests); err != nil {
		a.fail(w, err)
		return
	}
	if page.Requests == nil {
		page.Requests = []metering.RequestRow{}
	}
	writeJSON(w, http.StatusOK, page)
}

func requestQuery(r *http.Request) (metering.RequestQuery, error) {
	v := r.URL.Query()
	q := metering.RequestQuery{}
	for name, dst := range map[string]*string{
		"key": &q.KeyID, "project": &q.ProjectID, "model": &q.Model, "candidate": &q.Candidate, "cursor": &q.After,
	} {
		s := v.Get(name)
		if len(s) > maxFilterLen {
			return q, errors.New(name + ": too long")
		}
		*dst = s
	}
	if s := v.Get("status"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 100 || n > 599 {
			return q, errors.New("status: not an HTTP status code")
		}
		q.Status = n
	}
	for name, dst := range map[string]*time.Time{"since": &q.Since, "until": &q.Until} {
		if s := v.Get(name); s != "" {
			t, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return q, errors.New(name + ": not an RFC 3339 time")
			}
			*dst = t
		}
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > metering.MaxRequestPage {
			return q, errors.New("limit: not a number from 1 to " + strconv.Itoa(metering.MaxRequestPage))
		}
		q.Limit = n
	}
	return q, nil
}
