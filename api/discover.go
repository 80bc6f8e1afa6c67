package api

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"

	"cairn/errors"
)

// MetaAddr asks the gateway where the metadata service is (GET
// /.well-known/cairn), for clients that speak its gRPC API, such as the
// mount.
//
// A gateway names meta as it dials it. When that is a loopback or
// unspecified host ("127.0.0.1:8090", "[::]:8090": meta runs beside the
// gateway) and the endpoint's host is not, the answer is the endpoint's
// host with meta's port: a loopback address means nothing to a client on
// another machine.
func (c *Client) MetaAddr(ctx context.Context) (string, error) {
	const op = errors.Op("api.MetaAddr")
	resp, err := c.do(ctx, call{op: op, method: http.MethodGet, url: c.endpoint + "/.well-known/cairn"})
	if err != nil {
		return "", err
	}
	var res struct {
		Meta string `json:"meta"`
	}
	if err := decodeJSON(op, "", resp, &res); err != nil {
		return "", err
	}
	addr, err := seenFrom(c.endpoint, res.Meta)
	if err != nil {
		return "", errors.E(op, err)
	}
	return addr, nil
}

// seenFrom is meta's address advertised by the gateway at endpoint, as a
// client that reached that endpoint should dial it.
func seenFrom(endpoint, advertised string) (string, error) {
	host, port, err := net.SplitHostPort(advertised)
	if err != nil || port == "" {
		return "", errors.E(errors.Invalid, fmt.Sprintf("gateway advertises a bad meta address %q", advertised))
	}
	if !nearHost(host) {
		return advertised, nil
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", errors.E(errors.Invalid, err)
	}
	if h := u.Hostname(); h != "" && !nearHost(h) {
		return net.JoinHostPort(h, port), nil
	}
	return advertised, nil
}

// nearHost reports whether host means "this machine" (or any address of
// it) rather than one machine in particular.
func nearHost(host string) bool {
	if host == "" || host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && (ip.IsLoopback() || ip.IsUnspecified())
}
