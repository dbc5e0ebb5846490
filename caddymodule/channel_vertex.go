package caddymodule

import (
	"errors"
	"fmt"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/switchyard-gw/switchyard/channel"
	"github.com/switchyard-gw/switchyard/channel/vertex"
)

func init() {
	caddy.RegisterModule(VertexChannel{})
}

// VertexChannel is the `vertex` channel of a candidate: Claude on Google Vertex AI,
// authorised with Google OAuth2 access tokens. Each field may hold {env.*} placeholders.
type VertexChannel struct {
	// Project is the Google Cloud project id. Default: the project_id of the credentials.
	Project string `json:"project,omitempty"`
	// Region is the Vertex location: a region such as us-east5 or europe-west1, or
	// global, us or eu (the multi-region endpoints). Required.
	Region string `json:"region,omitempty"`
	// Endpoint overrides the base URL the requests go to. Default: Google's host for
	// the region.
	Endpoint string `json:"endpoint,omitempty"`
	// CredentialsFile is a service_account key or an authorized_user (gcloud) JSON
	// file. Default: Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS,
	// gcloud's application_default_credentials.json, the metadata server).
	CredentialsFile string `json:"credentials_file,omitempty"`

	ch *vertex.Channel
}

// CaddyModule returns the Caddy module information.
func (VertexChannel) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "switchyard.channels.vertex", New: func() caddy.Module { return new(VertexChannel) }}
}

// Provision loads the credentials: a file that cannot be read or used, or no default
// credentials at all, fails the load here rather than the first request.
func (v *VertexChannel) Provision(ctx caddy.Context) error {
	repl := caddy.NewReplacer()
	cfg := vertex.Config{
		Project:         repl.ReplaceKnown(v.Project, ""),
		Region:          repl.ReplaceKnown(v.Region, ""),
		Endpoint:        repl.ReplaceKnown(v.Endpoint, ""),
		CredentialsFile: repl.ReplaceKnown(v.CredentialsFile, ""),
	}
	ch, err := vertex.New(ctx, cfg)
	if err != nil {
		var ce *vertex.ConfigError
		if errors.As(err, &ce) && ce.Field == vertex.FieldCredentials {
			if cfg.CredentialsFile != "" {
				return fmt.Errorf("credentials_file: %s", ce.Message)
			}
			return fmt.Errorf("credentials (application default): %s", ce.Message)
		}
		return err
	}
	v.ch = ch
	return nil
}

// Channel implements ChannelModule.
func (v *VertexChannel) Channel() channel.Channel { return v.ch }

// UnmarshalCaddyfile reads
//
//	vertex {
//		project <id>
//		region <region|global|us|eu>
//		endpoint <url>
//		credentials_file <path>
//	}
func (v *VertexChannel) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the channel's name
	if d.NextArg() {
		return d.Errf("vertex takes no arguments, only a block")
	}
	for d.NextBlock(0) {
		opt := d.Val()
		target := map[string]*string{
			"project": &v.Project, "region": &v.Region, "endpoint": &v.Endpoint, "credentials_file": &v.CredentialsFile,
		}[opt]
		if target == nil {
			return d.Errf("unknown option %q (project, region, endpoint, credentials_file)", opt)
		}
		if !d.Args(target) || d.NextArg() {
			return d.Errf("%s: expected one value", opt)
		}
	}
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner     = (*VertexChannel)(nil)
	_ caddyfile.Unmarshaler = (*VertexChannel)(nil)
	_ ChannelModule         = (*VertexChannel)(nil)
)
