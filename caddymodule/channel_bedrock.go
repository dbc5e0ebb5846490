package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/switchyard-gw/switchyard/channel"
	"github.com/switchyard-gw/switchyard/channel/bedrock"
)

func init() {
	caddy.RegisterModule(BedrockChannel{})
}

// BedrockChannel is the `switchyard.channels.bedrock` module: a candidate reached
// through Amazon Bedrock's InvokeModel API or its Anthropic Messages endpoint, its upstream_model a Bedrock model id,
// inference profile id or ARN. Credentials, in this order: api_key; else
// access_key_id and secret_access_key (with session_token for temporary ones); else
// the default AWS chain (AWS_* environment variables, shared config and credentials
// files, web identity, container and instance roles), which must yield credentials
// when the config loads. Every field takes placeholders such as {env.AWS_REGION};
// one that resolves to nothing is a configuration error.
type BedrockChannel struct {
	// Region is the AWS region of the runtime endpoint and of the signature, such as
	// us-east-1. Required.
	Region string `json:"region,omitempty"`
	// Endpoint replaces https://bedrock-runtime.{region}.amazonaws.com (a VPC endpoint,
	// a FIPS host, a test server); a path on it comes before /model/…. Default: the
	// region's runtime endpoint.
	Endpoint string `json:"endpoint,omitempty"`
	// APIKey is a Bedrock API key, sent as `Authorization: Bearer`; requests are then not
	// signed. Default: none (SigV4).
	APIKey string `json:"api_key,omitempty"`
	// AccessKeyID is the AWS access key id requests are signed with; with
	// SecretAccessKey. Default: the default chain's.
	AccessKeyID string `json:"access_key_id,omitempty"`
	// SecretAccessKey is the secret of AccessKeyID.
	SecretAccessKey string `json:"secret_access_key,omitempty"`
	// SessionToken is the session token of temporary access keys. Default: none.
	SessionToken string `json:"session_token,omitempty"`
	// API is "invoke" (InvokeModel: the model id in the path, the stream as AWS event
	// stream) or "messages" (Claude in Amazon Bedrock: Anthropic's Messages API at
	// {endpoint}/anthropic/v1/messages, SSE; with an endpoint on a bedrock-mantle. host,
	// requests are signed for bedrock-mantle). Default: invoke.
	API string `json:"api,omitempty"`

	ch *bedrock.Channel
}

// CaddyModule returns the Caddy module information.
func (BedrockChannel) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "switchyard.channels.bedrock", New: func() caddy.Module { return new(BedrockChannel) }}
}

// credentialCheckTimeout bounds the default chain's first answer at load: on a machine
// without an instance role its metadata lookups would otherwise hold the load up.
const credentialCheckTimeout = 15 * time.Second

// Provision resolves the placeholders, builds the channel and, when the credentials
// come from the default chain, asks it for them once so that a gateway without any
// fails now rather than on its first request.
func (b *BedrockChannel) Provision(ctx caddy.Context) error {
	repl := caddy.NewReplacer()
	var cfg bedrock.Config
	for _, f := range []struct {
		name string
		raw  string
		dst  *string
	}{
		{"region", b.Region, &cfg.Region},
		{"endpoint", b.Endpoint, &cfg.Endpoint},
		{"api_key", b.APIKey, &cfg.APIKey},
		{"access_key_id", b.AccessKeyID, &cfg.AccessKeyID},
		{"secret_access_key", b.SecretAccessKey, &cfg.SecretAccessKey},
		{"session_token", b.SessionToken, &cfg.SessionToken},
		{"api", b.API, &cfg.API},
	} {
		v := strings.TrimSpace(repl.ReplaceKnown(f.raw, ""))
		if f.raw != "" && v == "" {
			return fmt.Errorf("%s: %s resolves to an empty value (is it set in the gateway's environment?)", f.name, placeholderNames(f.raw))
		}
		*f.dst = v
	}
	ch, err := bedrock.New(cfg)
	if err != nil {
		return err
	}
	if cfg.APIKey == "" && cfg.AccessKeyID == "" {
		checkCtx, cancel := context.WithTimeout(ctx, credentialCheckTimeout)
		defer cancel()
		if err := ch.CheckCredentials(checkCtx); err != nil {
			if errors.Is(err, channel.ErrCredential) {
				return errors.New("no AWS credentials: set api_key, or access_key_id and secret_access_key, " +
					"or give the gateway credentials through the default AWS chain (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, " +
					"AWS_PROFILE and the shared files, a web identity, a container or instance role)")
			}
			return err
		}
	}
	b.ch = ch
	return nil
}

// Channel returns the provisioned channel.
func (b *BedrockChannel) Channel() channel.Channel { return b.ch }

// UnmarshalCaddyfile reads
//
//	channel bedrock {
//		region <region>
//		endpoint <url>
//		api_key <key>
//		access_key_id <id>
//		secret_access_key <secret>
//		session_token <token>
//		api invoke|messages
//	}
func (b *BedrockChannel) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the channel's name
	if d.NextArg() {
		return d.ArgErr()
	}
	fields := map[string]*string{
		"region":            &b.Region,
		"endpoint":          &b.Endpoint,
		"api_key":           &b.APIKey,
		"access_key_id":     &b.AccessKeyID,
		"secret_access_key": &b.SecretAccessKey,
		"session_token":     &b.SessionToken,
		"api":               &b.API,
	}
	for d.NextBlock(0) {
		opt := d.Val()
		dst, ok := fields[opt]
		if !ok {
			return d.Errf("unknown option %q (region, endpoint, api_key, access_key_id, secret_access_key, session_token, api)", opt)
		}
		if !d.Args(dst) || d.NextArg() {
			return d.Errf("%s: expected one value", opt)
		}
	}
	return nil
}

// Interface guards
var (
	_ ChannelModule         = (*BedrockChannel)(nil)
	_ caddy.Provisioner     = (*BedrockChannel)(nil)
	_ caddyfile.Unmarshaler = (*BedrockChannel)(nil)
)
