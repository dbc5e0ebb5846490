package main

import (
	"context"
	"html/template"
	"log/slog"
	"net/http"
)

// The sign-in page's contract with the tests that drive it, a browser by element ids or
// a Go client by field names: keep these stable.
const (
	loginPath          = "/login"
	authRequestIDField = "authRequestID"
)

// maxLoginFormBytes bounds the posted form: two short fields and an id.
const maxLoginFormBytes = 16 << 10

var loginPage = template.Must(template.New("login").Parse(`<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>Sign in</title></head>
<body>
<h1>Sign in</h1>
{{if .Error}}<p id="error" role="alert">{{.Error}}</p>{{end}}
<form id="login" method="post" action="` + loginPath + `">
<input type="hidden" id="` + authRequestIDField + `" name="` + authRequestIDField + `" value="{{.ID}}">
<p><label for="username">Username</label>
<input type="text" id="username" name="username" value="{{.Username}}" autocomplete="username" autofocus required></p>
<p><label for="password">Password</label>
<input type="password" id="password" name="password" autocomplete="current-password" required></p>
<p><button type="submit" id="submit">Sign in</button></p>
</form>
</body>
</html>
`))

type loginView struct {
	ID       string
	Username string
	Error    string
}

// loginHandler serves the sign-in step op redirects to from /authorize: the form on
// GET, the password check on POST. A right password completes the auth request and
// sends the browser to op's callback, which redirects to the client with code and state.
type loginHandler struct {
	storage  *memoryStorage
	callback func(ctx context.Context, authRequestID string) string
}

func (h *loginHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		id := r.URL.Query().Get(authRequestIDField)
		if !h.storage.pendingSignIn(id) {
			http.Error(w, "no such sign-in in progress; start again at the application", http.StatusBadRequest)
			return
		}
		h.render(w, http.StatusOK, loginView{ID: id})
	case http.MethodPost:
		r.Body = http.MaxBytesReader(w, r.Body, maxLoginFormBytes)
		if err := r.ParseForm(); err != nil {
			http.Error(w, "unreadable form", http.StatusBadRequest)
			return
		}
		id, username := r.PostForm.Get(authRequestIDField), r.PostForm.Get("username")
		switch err := h.storage.signIn(id, username, r.PostForm.Get("password")); err {
		case nil:
			slog.Info("signed in", "username", username)
			http.Redirect(w, r, h.callback(r.Context(), id), http.StatusFound)
		case errBadCredentials:
			slog.Info("sign-in refused", "username", username)
			h.render(w, http.StatusUnauthorized, loginView{ID: id, Username: username, Error: "Wrong username or password."})
		default:
			http.Error(w, "no such sign-in in progress; start again at the application", http.StatusBadRequest)
		}
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

func (h *loginHandler) render(w http.ResponseWriter, status int, v loginView) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if err := loginPage.Execute(w, v); err != nil {
		slog.Error("rendering the sign-in page", "err", err)
	}
}
