// Package metatest helps tests attack meta's API: it calls every method of
// the service, by its descriptor, with a request aimed at one namespace,
// so that a method added later is attacked too.
package metatest

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"cairn/proto/metapb"
)

// Service is the descriptor of meta's API.
var Service = metapb.File_proto_meta_proto.Services().ByName("Meta")

// NewMessage returns an empty message of type d.
func NewMessage(d protoreflect.MessageDescriptor) proto.Message {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(d.FullName())
	if err != nil {
		panic(err) // the generated package registers every message
	}
	return mt.New().Interface()
}

// AttackRequest is a request of method md's type aimed at namespace ns:
// every namespace (and user) field names it, other names are "x", and
// batches and nested requests hold one such item.
func AttackRequest(md protoreflect.MethodDescriptor, ns string) proto.Message {
	m := NewMessage(md.Input())
	fill(m.ProtoReflect(), ns)
	return m
}

func fill(m protoreflect.Message, ns string) {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		f := fields.Get(i)
		switch {
		case f.Kind() == protoreflect.StringKind && !f.IsList() && !f.IsMap():
			switch f.Name() {
			case "ns", "bucket", "name", "src_ns", "dst_ns", "user":
				m.Set(f, protoreflect.ValueOfString(ns))
			case "path", "key", "access_key", "server", "upload_id", "server_id", "addr":
				m.Set(f, protoreflect.ValueOfString("x"))
			}
		case f.Kind() == protoreflect.MessageKind && f.IsList():
			l := m.Mutable(f).List()
			e := l.NewElement()
			fill(e.Message(), ns)
			l.Append(e)
		case f.Kind() == protoreflect.MessageKind && !f.IsMap():
			fill(m.Mutable(f).Message(), ns)
		}
	}
}

// Call calls method (its bare name) on cc with an attack request.
func Call(cc grpc.ClientConnInterface, method, ns string) error {
	md := Service.Methods().ByName(protoreflect.Name(method))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return cc.Invoke(ctx, "/"+string(Service.FullName())+"/"+method, AttackRequest(md, ns), NewMessage(md.Output()))
}

// CallEvery calls every unary method on cc and hands each error to check.
// cc is a connection from meta.Dial, so errors carry Cairn's kinds.
func CallEvery(cc grpc.ClientConnInterface, ns string, check func(method string, err error)) {
	ms := Service.Methods()
	for i := 0; i < ms.Len(); i++ {
		md := ms.Get(i)
		if md.IsStreamingClient() || md.IsStreamingServer() {
			continue
		}
		check(string(md.Name()), Call(cc, string(md.Name()), ns))
	}
}

// Snapshot is the state an attack must not change, read from the service
// itself (no caller, so nothing is filtered): namespaces, users, keys and
// grants, and the trees of the namespaces named.
func Snapshot(t testing.TB, svc metapb.MetaServer, namespaces ...string) string {
	t.Helper()
	ctx := context.Background()
	var out []byte
	add := func(m proto.Message, err error) {
		if err != nil {
			t.Fatal(err)
		}
		b, _ := prototext.Marshal(m)
		out = append(out, b...)
	}
	add(svc.ListNamespaces(ctx, &metapb.Empty{}))
	add(svc.S3ListUsers(ctx, &metapb.Empty{}))
	add(svc.S3ListKeys(ctx, &metapb.S3UserRequest{}))
	for _, ns := range namespaces {
		add(svc.List(ctx, &metapb.ListRequest{Ns: ns}))
	}
	return string(out)
}
