package console

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed assets
var assets embed.FS

// New serves the web console: the page and its script and styles at the root, and the
// JSON API under /api/. Mount it with the mount path stripped (Caddy's handle_path), so
// the page's relative URLs resolve under it.
func New(api *API) http.Handler {
	pages, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is part of the binary
	}
	files := http.FileServerFS(pages)
	apiHandler := http.StripPrefix("/api", api.Handler())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// The page loads nothing from anywhere else and is never framed.
		h.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		if len(r.URL.Path) >= 5 && r.URL.Path[:5] == "/api/" {
			apiHandler.ServeHTTP(w, r)
			return
		}
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
