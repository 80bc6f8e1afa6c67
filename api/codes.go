package api

import (
	"fmt"
	"net/http"

	"cairn/errors"
)

// codes is the one translation table between the native API's error codes
// and Kinds, in the gateway's order. The HTTP status is there so that a
// response without a JSON body (a HEAD, a proxy's error page) still gets the
// most likely Kind.
var codes = []struct {
	code   string
	status int
	kind   errors.Kind
}{
	{"InvalidArgument", http.StatusBadRequest, errors.Invalid},
	{"NameTooLong", http.StatusBadRequest, errors.NameTooLong},
	{"BadDigest", http.StatusBadRequest, errors.BadDigest},
	{"Unauthenticated", http.StatusUnauthorized, errors.Unauthenticated},
	{"AccessDenied", http.StatusForbidden, errors.Permission},
	{"NoSuchNamespace", http.StatusNotFound, errors.NotExist},
	{"NoSuchKey", http.StatusNotFound, errors.NotExist},
	{"MethodNotAllowed", http.StatusMethodNotAllowed, errors.Invalid},
	{"AlreadyExists", http.StatusConflict, errors.Exist},
	{"NotEmpty", http.StatusConflict, errors.NotEmpty},
	{"IsDirectory", http.StatusConflict, errors.IsDir},
	{"NotDirectory", http.StatusConflict, errors.NotDir},
	{"PreconditionFailed", http.StatusPreconditionFailed, errors.Precondition},
	{"TooLarge", http.StatusRequestEntityTooLarge, errors.TooLarge},
	{"InvalidRange", http.StatusRequestedRangeNotSatisfiable, errors.Range},
	{"Corrupt", http.StatusInternalServerError, errors.Corrupt},
	{"Internal", http.StatusInternalServerError, errors.IO},
	{"Unavailable", http.StatusServiceUnavailable, errors.Unavailable},
}

// kindOf returns the Kind of an error code, or failing that of a status.
func kindOf(code string, status int) errors.Kind {
	for _, c := range codes {
		if c.code == code {
			return c.kind
		}
	}
	switch status {
	case http.StatusNotModified:
		return errors.Precondition
	case http.StatusBadGateway, http.StatusGatewayTimeout:
		return errors.Unavailable
	}
	for _, c := range codes {
		if c.status == status {
			return c.kind
		}
	}
	return errors.Other
}

// ServerError is the cause inside an *errors.Error built from an error
// response: what the server said, verbatim.
type ServerError struct {
	Status  int    // HTTP status
	Code    string // API error code, like "NoSuchKey"; "" if the body had none
	Message string // the server's message
}

func (e *ServerError) Error() string {
	switch {
	case e.Message != "":
		return e.Message
	case e.Code != "":
		return e.Code
	}
	return fmt.Sprintf("HTTP %d %s", e.Status, http.StatusText(e.Status))
}

// CodeOf returns the API error code inside err ("NoSuchKey"), or "".
func CodeOf(err error) string {
	var se *ServerError
	if errors.As(err, &se) {
		return se.Code
	}
	return ""
}
