package api

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"cairn/errors"
)

// DefaultEndpoint is where `cairn server` listens unless told otherwise.
const DefaultEndpoint = "http://127.0.0.1:8080"

// CredentialsFiles are where `cairn server` keeps the root key pair it
// generates on its first start, relative to the directory it was started
// in (with the default --data), in the order they are tried.
var CredentialsFiles = []string{"data/root.credentials", "data/meta/root.credentials"}

// Config is where a client connects and as whom.
type Config struct {
	Endpoint  string
	AccessKey string
	SecretKey string
}

// ConfigFromEnv reads the client's configuration from the environment:
//
//	CAIRN_ENDPOINT                        default http://127.0.0.1:8080
//	CAIRN_ACCESS_KEY, CAIRN_SECRET_KEY    the key pair, or else
//	CAIRN_ROOT_USER, CAIRN_ROOT_PASSWORD  the root pair, or else
//	./data/root.credentials               the file `cairn server` writes
//	./data/meta/root.credentials          (or this one)
//
// The file makes the quick start (`cairn server` in one terminal, `cairn
// put` in another, same directory) work without exports. No credentials at
// all is not an error: requests are then anonymous.
func ConfigFromEnv() (Config, error) {
	cfg := Config{Endpoint: os.Getenv("CAIRN_ENDPOINT")}
	if cfg.Endpoint == "" {
		cfg.Endpoint = DefaultEndpoint
	}
	pairs := [][2]string{
		{os.Getenv("CAIRN_ACCESS_KEY"), os.Getenv("CAIRN_SECRET_KEY")},
		{os.Getenv("CAIRN_ROOT_USER"), os.Getenv("CAIRN_ROOT_PASSWORD")},
	}
	for _, p := range pairs {
		if p[0] != "" {
			cfg.AccessKey, cfg.SecretKey = p[0], p[1]
			return cfg, nil
		}
	}
	for _, name := range CredentialsFiles {
		vars, err := ReadCredentials(name)
		if errors.Is(errors.NotExist, err) {
			continue
		}
		if err != nil {
			return cfg, err
		}
		cfg.AccessKey, cfg.SecretKey = vars["CAIRN_ROOT_USER"], vars["CAIRN_ROOT_PASSWORD"]
		return cfg, nil
	}
	return cfg, nil
}

// FromEnv returns a Client configured by ConfigFromEnv.
func FromEnv(opts ...Option) (*Client, error) {
	cfg, err := ConfigFromEnv()
	if err != nil {
		return nil, err
	}
	return New(cfg.Endpoint, cfg.AccessKey, cfg.SecretKey, opts...), nil
}

// ReadCredentials parses a credentials file: NAME=value lines, as a shell
// would source them (an "export " prefix and quotes are allowed, '#'
// starts a comment line). A missing file is errors.NotExist.
func ReadCredentials(path string) (map[string]string, error) {
	const op = errors.Op("api.ReadCredentials")
	f, err := os.Open(path)
	if err != nil {
		kind := errors.IO
		if os.IsNotExist(err) {
			kind = errors.NotExist
		}
		return nil, errors.E(op, errors.Path(path), kind, err)
	}
	defer f.Close()
	vars := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if !ok {
			return nil, errors.E(op, errors.Path(path), errors.Invalid, fmt.Errorf("line %d: want NAME=value", n))
		}
		vars[strings.TrimSpace(name)] = unquote(strings.TrimSpace(value))
	}
	if err := sc.Err(); err != nil {
		return nil, errors.E(op, errors.Path(path), errors.IO, err)
	}
	return vars, nil
}

func unquote(v string) string {
	if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
		return v[1 : len(v)-1]
	}
	return v
}
