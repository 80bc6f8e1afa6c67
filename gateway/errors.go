package gateway

import (
	"encoding/json"
	"net/http"

	"cairn/errors"
)

// status is the one translation table from Kind to HTTP status and API
// error code at this edge.
var status = map[errors.Kind]struct {
	code int
	name string
}{
	errors.Invalid:         {http.StatusBadRequest, "InvalidArgument"},
	errors.NameTooLong:     {http.StatusBadRequest, "NameTooLong"},
	errors.BadDigest:       {http.StatusBadRequest, "BadDigest"},
	errors.Unauthenticated: {http.StatusUnauthorized, "Unauthenticated"},
	errors.Permission:      {http.StatusForbidden, "AccessDenied"},
	errors.NotExist:        {http.StatusNotFound, "NoSuchKey"},
	errors.Exist:           {http.StatusConflict, "AlreadyExists"},
	errors.NotEmpty:        {http.StatusConflict, "NotEmpty"},
	errors.IsDir:           {http.StatusConflict, "IsDirectory"},
	errors.NotDir:          {http.StatusConflict, "NotDirectory"},
	errors.Precondition:    {http.StatusPreconditionFailed, "PreconditionFailed"},
	errors.TooLarge:        {http.StatusRequestEntityTooLarge, "TooLarge"},
	errors.Range:           {http.StatusRequestedRangeNotSatisfiable, "InvalidRange"},
	errors.Corrupt:         {http.StatusInternalServerError, "Corrupt"},
	errors.IO:              {http.StatusInternalServerError, "Internal"},
	errors.Other:           {http.StatusInternalServerError, "Internal"},
	errors.Unavailable:     {http.StatusServiceUnavailable, "Unavailable"},
	errors.ReadOnly:        {http.StatusServiceUnavailable, "Unavailable"},
	errors.Stale:           {http.StatusServiceUnavailable, "Unavailable"},
	errors.Canceled:        {499, "Canceled"},
	errors.NoSpace:         {http.StatusInsufficientStorage, "InsufficientStorage"},
	errors.DataLoss:        {http.StatusInternalServerError, "DataLoss"},
}

// errNoNamespace marks a NotExist that concerns the namespace itself, so
// the body says NoSuchNamespace rather than NoSuchKey.
type errNoNamespace struct{ error }

func (e errNoNamespace) Unwrap() error { return e.error }

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Path    string `json:"path,omitempty"`
	} `json:"error"`
}

// writeError sends err as status + JSON body and returns the status.
func writeError(w http.ResponseWriter, err error) int {
	k := errors.KindOf(err)
	s, ok := status[k]
	if !ok {
		s = status[errors.Other]
	}
	var body errorBody
	body.Error.Code = s.name
	var nn errNoNamespace
	if k == errors.NotExist && errors.As(err, &nn) {
		body.Error.Code = "NoSuchNamespace"
	}
	body.Error.Message = err.Error()
	var e *errors.Error
	if errors.As(err, &e) {
		body.Error.Message = e.Message()
	}
	body.Error.Path = string(errors.PathOf(err))
	if k == errors.Unauthenticated {
		w.Header().Set("WWW-Authenticate", `Basic realm="cairn"`)
	}
	h := w.Header()
	for _, k := range []string{"Content-Length", "ETag", "Last-Modified", "Accept-Ranges"} {
		h.Del(k)
	}
	writeJSON(w, s.code, body)
	return s.code
}

func methodNotAllowed(w http.ResponseWriter, allow string) int {
	w.Header().Set("Allow", allow)
	var body errorBody
	body.Error.Code = "MethodNotAllowed"
	body.Error.Message = "method not allowed; allowed: " + allow
	writeJSON(w, http.StatusMethodNotAllowed, body)
	return http.StatusMethodNotAllowed
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}
