# Container image of the m3serve bundle. Build the bundle first, then the image:
#   make dist && make docker
#   (or: docker build --build-arg BUNDLE=dist/m3serve-<version>-x86_64-cuda13 -t m3serve:<version> .)
# Run: docker run --gpus all -p 8000:8000 -v /models:/models m3serve:<version> serve /models/MiniMax-M3 ...
# (docs/deployment.md). Nothing is compiled here: the image is the NVIDIA CUDA runtime image (Ubuntu 24.04,
# glibc 2.39 >= the 2.36 of the Debian 12 build host; CUDA 13.0.2, the toolkit the bundle is built with) plus
# Open MPI for multi-rank runs, plus the bundle in /opt/m3serve.
ARG BASE_IMAGE=nvidia/cuda:13.0.2-runtime-ubuntu24.04

FROM ${BASE_IMAGE} AS runtime
# Open MPI from the image's distribution: mpirun for `m3 serve --tensor-parallel-size N` and mpirun launches,
# PMIx for srun, and the MCA plugins MPI_Init loads at run time (a bundled libmpi alone cannot find those).
ARG WITH_OPENMPI=1
RUN if [ "$WITH_OPENMPI" = 1 ]; then \
      apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openmpi-bin && \
      rm -rf /var/lib/apt/lists/*; \
    fi

FROM runtime AS bundle
ARG BUNDLE=dist/m3serve-0.1.0-x86_64-cuda13
COPY ${BUNDLE} /opt/m3serve
# Where the image has a library of the same soname (the CUDA runtime and cuBLAS, libstdc++, Open MPI, zlib, ...)
# the image's copy is used and the bundle's is dropped: one copy of each library in the process, consistent with
# the image's Open MPI plugins, and ~600 MB less. The bundle keeps what the image lacks (yaml-cpp, utf8proc, ...).
# PREFER_IMAGE_LIBS=0 keeps the bundle exactly as `make dist` verified it.
ARG PREFER_IMAGE_LIBS=1
RUN if [ "$PREFER_IMAGE_LIBS" = 1 ]; then \
      cd /opt/m3serve/lib && for f in *; do \
        if ldconfig -p | awk -v n="$f" '$1 == n { found = 1 } END { exit !found }'; then rm "$f"; echo "image's $f"; fi; \
      done; \
    fi

FROM runtime
COPY --from=bundle /opt/m3serve /opt/m3serve
# Fail the build if a library is missing or a symbol does not resolve (--version needs no GPU).
RUN ! ldd /opt/m3serve/bin/m3 | grep 'not found' && LD_BIND_NOW=1 /opt/m3serve/bin/m3 --version
RUN useradd --system --create-home --uid 10001 m3serve
USER m3serve
ENV PATH=/opt/m3serve/bin:$PATH \
    OMPI_MCA_btl_vader_single_copy_mechanism=none
# (Open MPI's shared-memory transport: CMA single copy needs ptrace rights that containers usually lack.)
EXPOSE 8000
ENTRYPOINT ["/opt/m3serve/bin/m3"]
CMD ["serve", "--help"]
