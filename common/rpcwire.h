/*
 * rpcwire.h: what both ends of a gRPC call need (the daemon, and the C
 * client of client/lib/rpc.h): gRPC status names, protobuf-c messages
 * packed into gRPC byte buffers, and the trailer the daemon's GraphError
 * travels in. The daemon includes this, never client code.
 */
#ifndef COMMON_RPCWIRE_H
#define COMMON_RPCWIRE_H

#include <grpc/grpc.h>
#include <grpc/status.h>
#include <protobuf-c/protobuf-c.h>

/* The binary trailing metadata entry that carries a GraphError. */
#define RPC_GRAPH_ERROR_KEY "compiled-error-bin"

/* "OK", "INVALID_ARGUMENT", ...; "UNKNOWN_CODE" for an unknown number. */
const char *rpc_code_name(grpc_status_code code);

/* `m` packed into a new byte buffer (one allocation). */
grpc_byte_buffer *rpc_pack(const ProtobufCMessage *m);

#endif
