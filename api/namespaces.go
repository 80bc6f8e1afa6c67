package api

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"cairn/errors"
)

// Visibility says who may read a namespace.
type Visibility string

const (
	Private Visibility = "private" // only its owner (and root)
	Public  Visibility = "public"  // anyone may GET and HEAD, without credentials
)

// Namespace is a top-level container of files (a bucket).
type Namespace struct {
	Name       string     `json:"name"`
	Visibility Visibility `json:"visibility"`
	Owner      string     `json:"owner"`
	Created    time.Time  `json:"created"`
	Class      string     `json:"storage_class,omitempty"` // storage class (tiers)
}

// Namespaces lists the namespaces the caller can see.
func (c *Client) Namespaces(ctx context.Context) ([]Namespace, error) {
	const op = errors.Op("api.Namespaces")
	resp, err := c.do(ctx, call{op: op, method: http.MethodGet, url: c.endpoint + "/"})
	if err != nil {
		return nil, err
	}
	var res struct {
		Namespaces []Namespace `json:"namespaces"`
	}
	if err := decodeJSON(op, "", resp, &res); err != nil {
		return nil, err
	}
	return res.Namespaces, nil
}

// CreateNamespace creates namespace name. If it exists already the error
// is errors.Exist and nothing changes. A public namespace is created
// private and then opened, so that it is never briefly more open than asked.
func (c *Client) CreateNamespace(ctx context.Context, name string, vis Visibility) (*Namespace, error) {
	return c.CreateNamespaceClass(ctx, name, vis, "")
}

// CreateNamespaceClass is CreateNamespace with a storage class (a name
// meta knows: "replicated", "ec-4+2", or one it is configured with; ""
// is replicated).
func (c *Client) CreateNamespaceClass(ctx context.Context, name string, vis Visibility, class string) (*Namespace, error) {
	const op = errors.Op("api.CreateNamespace")
	if err := validVisibility(op, name, vis); err != nil {
		return nil, err
	}
	// No visibility parameter: on an existing namespace the PUT is then a
	// no-op that answers 200, which tells us it was there.
	query := ""
	if class != "" {
		query = "class=" + url.QueryEscape(class)
	}
	ns, status, err := c.putNamespace(ctx, op, name, query)
	if err != nil {
		return nil, err
	}
	if status != http.StatusCreated {
		return nil, errors.E(op, errors.Path(name), errors.Exist, "namespace already exists")
	}
	if vis == Public {
		return c.SetVisibility(ctx, name, Public)
	}
	return ns, nil
}

// SetVisibility changes who may read namespace name (creating it if it
// does not exist, as the API does).
func (c *Client) SetVisibility(ctx context.Context, name string, vis Visibility) (*Namespace, error) {
	const op = errors.Op("api.SetVisibility")
	if err := validVisibility(op, name, vis); err != nil {
		return nil, err
	}
	ns, _, err := c.putNamespace(ctx, op, name, "visibility="+string(vis))
	return ns, err
}

// DeleteNamespace deletes an empty namespace (errors.NotEmpty otherwise).
func (c *Client) DeleteNamespace(ctx context.Context, name string) error {
	const op = errors.Op("api.DeleteNamespace")
	resp, err := c.do(ctx, call{op: op, path: name, method: http.MethodDelete, url: c.objectURL(name, "", "")})
	if err != nil {
		return err
	}
	return drain(resp)
}

func (c *Client) putNamespace(ctx context.Context, op errors.Op, name, query string) (*Namespace, int, error) {
	resp, err := c.do(ctx, call{op: op, path: name, method: http.MethodPut, url: c.objectURL(name, "", query)})
	if err != nil {
		return nil, 0, err
	}
	var ns Namespace
	if err := decodeJSON(op, name, resp, &ns); err != nil {
		return nil, 0, err
	}
	return &ns, resp.StatusCode, nil
}

func validVisibility(op errors.Op, name string, vis Visibility) error {
	if vis != Public && vis != Private {
		return errors.Errorf(op, errors.Invalid, "namespace %s: visibility must be public or private, not %q", name, vis)
	}
	return nil
}
