package console

import (
	"encoding/json"
	"net/http"

	"cairn/errors"
)

// status is the console's one Kind -> HTTP status table. The body has the
// native API's shape, so the pages read every error the same way.
var status = map[errors.Kind]struct {
	code int
	name string
}{
	errors.Invalid:         {http.StatusBadRequest, "InvalidArgument"},
	errors.Unauthenticated: {http.StatusUnauthorized, "Unauthenticated"},
	errors.Permission:      {http.StatusForbidden, "AccessDenied"},
	errors.NotExist:        {http.StatusNotFound, "NoSuchKey"},
	errors.Exist:           {http.StatusConflict, "AlreadyExists"},
	errors.Unavailable:     {http.StatusServiceUnavailable, "Unavailable"},
	errors.Other:           {http.StatusInternalServerError, "Internal"},
}

func writeError(w http.ResponseWriter, err error) {
	s, ok := status[errors.KindOf(err)]
	if !ok {
		s = status[errors.Other]
	}
	msg := err.Error()
	var e *errors.Error
	if errors.As(err, &e) {
		msg = e.Message()
	}
	writeBody(w, s.code, s.name, msg)
}

// writeBody writes an error answer: the native API's error shape.
func writeBody(w http.ResponseWriter, code int, name, msg string) {
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	body.Error.Code, body.Error.Message = name, msg
	writeJSON(w, code, body)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}
